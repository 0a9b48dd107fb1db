// A blocking HTTP/1.1 client for server tests, able to send well-formed and hostile bytes.
#pragma once

#include <string>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace optimate::server::testing {

namespace net = boost::asio;
namespace http = boost::beast::http;

// A POST with a JSON body, as bytes: for requests sent now and answered later.
inline std::string raw_post(const std::string& target, const std::string& body) {
  return "POST " + target + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

struct Reply {
  int status = 0;
  std::string body;
  http::response<http::string_body> message;
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

class TestClient {
 public:
  explicit TestClient(uint16_t port) : socket_(ioc_) {
    socket_.connect({net::ip::make_address("127.0.0.1"), port});
  }

  void send_raw(const std::string& bytes) { net::write(socket_, net::buffer(bytes)); }

  // `head`: the reply to a HEAD request, which has headers only.
  Reply read_reply(bool head = false) {
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    parser.skip(head);
    http::read(socket_, buffer_, parser);
    Reply r;
    r.message = parser.release();
    r.status = r.message.result_int();
    r.body = r.message.body();
    return r;
  }

  Reply request(http::verb method, const std::string& target, const std::string& body = {},
                const std::string& api_key = {}) {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
    req.body() = body;
    req.prepare_payload();
    http::write(socket_, req);
    return read_reply();
  }
  // A request with extra header fields.
  Reply request_with(http::verb method, const std::string& target,
                     const std::vector<std::pair<std::string, std::string>>& fields,
                     const std::string& body = {}) {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [name, value] : fields) req.set(name, value);
    req.body() = body;
    req.prepare_payload();
    http::write(socket_, req);
    return read_reply(method == http::verb::head);
  }
  // Everything the server sends until it closes the connection.
  std::string read_until_closed() {
    std::string out(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    buffer_.consume(buffer_.size());
    char chunk[4096];
    for (;;) {
      boost::system::error_code ec;
      size_t n = socket_.read_some(net::buffer(chunk), ec);
      out.append(chunk, n);
      if (ec) return out;
    }
  }
  Reply post(const std::string& target, const nlohmann::json& body, const std::string& key = {}) {
    return request(http::verb::post, target, body.dump(), key);
  }
  Reply get(const std::string& target, const std::string& key = {}) {
    return request(http::verb::get, target, {}, key);
  }
  // True when the server closed the connection (reads EOF).
  bool closed_by_server() {
    boost::system::error_code ec;
    char c;
    socket_.read_some(net::buffer(&c, 1), ec);
    return ec == net::error::eof || ec == net::error::connection_reset;
  }
  void close() { socket_.close(); }

 private:
  net::io_context ioc_;
  net::ip::tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
};

}  // namespace optimate::server::testing
