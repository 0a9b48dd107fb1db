// A loopback HTTP server that misbehaves on cue, for the benchmark client's tests: each
// POST /v1/completions is answered by the script named by its text prompt ("ok", "cut",
// "garbage", ...), written as raw bytes so framing errors can be produced at will.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace optimate::bench::testing {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using Json = nlohmann::json;

inline std::string sse(const Json& event) { return "data: " + event.dump() + "\n\n"; }
inline std::string text_chunk(const std::string& text) {
  return sse({{"choices", {{{"index", 0}, {"text", text}, {"finish_reason", nullptr}}}}});
}
inline std::string usage_chunk(int64_t prompt, int64_t completion) {
  return sse({{"choices", Json::array()},
              {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", completion}}}});
}
inline std::string http_chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

class ScriptedServer {
 public:
  ScriptedServer() : acceptor_(ioc_, {net::ip::make_address("127.0.0.1"), 0}) {
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~ScriptedServer() {
    stop_ = true;
    boost::system::error_code ec;
    tcp::socket wake(ioc_);
    wake.connect(acceptor_.local_endpoint(), ec);  // unblocks accept()
    accept_thread_.join();
    for (auto& t : connection_threads_) t.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }
  int64_t connections_accepted() const { return accepted_.load(); }
  int64_t max_active() const { return max_active_.load(); }
  int64_t completions_received() const { return received_.load(); }
  std::string last_authorization() const {
    std::lock_guard lock(mutex_);
    return last_authorization_;
  }

  // Each completion is answered only once this many are in flight at once, or once this many
  // have arrived in all (the last ones may come alone): requests overlap, by a condition rather
  // than a delay. 0: answered at once.
  int64_t hold_until_in_flight = 0;
  int64_t hold_until_received = 0;
  // The body of the n-th GET /metrics (n from 0); unset or empty: 404, as a server without it.
  std::function<std::string(int64_t)> metrics;
  // Called on the server's thread when a "stall" request has arrived and will get no answer;
  // "head-then-stall" calls it every 50 ms after its first event, until the client hangs up.
  std::function<void()> on_stall;

 private:
  void accept_loop() {
    for (;;) {
      tcp::socket socket(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (stop_) return;
      if (ec) continue;
      ++accepted_;
      connection_threads_.emplace_back([this, s = std::move(socket)]() mutable { serve(s); });
    }
  }

  void serve(tcp::socket& socket) {
    boost::beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> req;
      boost::system::error_code ec;
      http::read(socket, buffer, req, ec);
      if (ec) return;
      {
        std::lock_guard lock(mutex_);
        last_authorization_ = std::string(req[http::field::authorization]);
      }
      if (req.target() == "/metrics") {
        std::string body;
        {
          std::lock_guard lock(mutex_);
          if (metrics) body = metrics(scrapes_++);
        }
        if (body.empty()) write(socket, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        else write(socket, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body);
        continue;
      }
      if (req.target() == "/v1/models") {
        const std::string body = R"({"object":"list","data":[{"id":"scripted-model","object":"model"}]})";
        write(socket, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body);
        continue;
      }
      ++received_;
      const Json body = Json::parse(req.body());
      int64_t active = 0;
      {
        std::unique_lock lock(mutex_);
        active = ++active_;
        hold_.notify_all();
        hold_.wait(lock, [&] {
          return hold_until_in_flight == 0 || active_ >= hold_until_in_flight || received_ >= hold_until_received;
        });
      }
      int64_t seen = max_active_.load();
      while (active > seen && !max_active_.compare_exchange_weak(seen, active)) {}
      const bool keep = answer(socket, body);
      {
        std::lock_guard lock(mutex_);
        --active_;
      }
      if (!keep) return;
    }
  }

  void write(tcp::socket& socket, const std::string& bytes) {
    boost::system::error_code ec;
    net::write(socket, net::buffer(bytes), ec);
  }
  void event(tcp::socket& socket, const std::string& data) {
    write(socket, http_chunk(data));
  }
  void stream_head(tcp::socket& socket) {
    write(socket, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
  }
  void error_reply(tcp::socket& socket, int status, const std::string& reason, const std::string& message) {
    const std::string body = Json{{"error", {{"message", message}, {"code", status}}}}.dump();
    write(socket, "HTTP/1.1 " + std::to_string(status) + " " + reason +
                      "\r\nContent-Type: application/json\r\nRetry-After: 1\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body);
  }

  // Returns whether the connection stays open for the next request.
  bool answer(tcp::socket& socket, const Json& body) {
    const std::string script = body.value("prompt", "");
    const int64_t max_tokens = body.value("max_tokens", 1);
    if (script == "ok" || script == "ok-then-close") {
      stream_head(socket);
      for (int64_t i = 0; i < max_tokens; ++i) event(socket, text_chunk("t"));
      event(socket, usage_chunk(3, max_tokens));
      event(socket, "data: [DONE]\n\n");
      write(socket, "0\r\n\r\n");
      return script == "ok";  // ok-then-close: as a server whose idle timeout closes it
    }
    if (script == "two-per-chunk") {  // every event carries two tokens; two events per write
      stream_head(socket);
      event(socket, text_chunk("ab") + text_chunk("cd"));
      event(socket, text_chunk("ef") + usage_chunk(3, 6) + "data: [DONE]\n\n");
      write(socket, "0\r\n\r\n");
      return true;
    }
    if (script == "until-eof") {  // no length, no chunking: the body ends when the server closes
      write(socket, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
      write(socket, text_chunk("x") + text_chunk("y") + usage_chunk(3, 2) + "data: [DONE]\n\n");
      return false;
    }
    if (script == "cut") {  // the server dies mid-stream
      stream_head(socket);
      event(socket, text_chunk("a"));
      event(socket, text_chunk("b"));
      return false;
    }
    if (script == "garbage") {
      stream_head(socket);
      event(socket, text_chunk("a"));
      event(socket, "data: {this is not json\n\n");
      event(socket, usage_chunk(3, 1) + "data: [DONE]\n\n");
      write(socket, "0\r\n\r\n");
      return true;
    }
    if (script == "no-usage" || script == "no-done") {
      stream_head(socket);
      event(socket, text_chunk("a"));
      if (script == "no-done") event(socket, usage_chunk(3, 1));
      else event(socket, "data: [DONE]\n\n");
      write(socket, "0\r\n\r\n");
      return true;
    }
    if (script == "stall") {  // silence until the client gives up
      if (on_stall) on_stall();
      char byte;
      boost::system::error_code ec;
      socket.read_some(net::buffer(&byte, 1), ec);
      return false;
    }
    if (script == "head-then-stall") {  // the head and one event, then silence
      stream_head(socket);
      event(socket, text_chunk("a"));
      for (;;) {
        pollfd fd{socket.native_handle(), POLLIN, 0};
        if (::poll(&fd, 1, 50) == 0) {
          if (on_stall) on_stall();
          continue;
        }
        char byte;
        boost::system::error_code ec;
        socket.read_some(net::buffer(&byte, 1), ec);
        if (ec) return false;
      }
    }
    if (script == "overloaded") {
      error_reply(socket, 503, "Service Unavailable", "queue full");
      return true;
    }
    error_reply(socket, 400, "Bad Request", "unknown script '" + script + "'");
    return true;
  }

  net::io_context ioc_;
  tcp::acceptor acceptor_;
  std::thread accept_thread_;
  std::vector<std::thread> connection_threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> accepted_{0}, active_{0}, max_active_{0}, received_{0};
  mutable std::mutex mutex_;
  std::condition_variable hold_;
  std::string last_authorization_;
  int64_t scrapes_ = 0;
};

}  // namespace optimate::bench::testing
