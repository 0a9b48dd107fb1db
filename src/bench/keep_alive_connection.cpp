#include "bench/keep_alive_connection.h"

#include <limits>

#include <boost/asio/connect.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <fmt/format.h>

namespace optimate::bench {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

// Body bytes handed on per read; a streamed chunk is far smaller.
constexpr size_t kReadBytes = 16 << 10;

bool closed_by_peer(const error_code& ec) {
  return ec == net::error::eof || ec == http::error::end_of_stream || ec == http::error::partial_message ||
         ec == net::error::connection_reset || ec == net::error::broken_pipe;
}

}  // namespace

KeepAliveConnection::KeepAliveConnection(const net::any_io_executor& executor,
                                         net::ip::tcp::resolver::results_type endpoints, double timeout_s)
    : stream_(executor),
      endpoints_(std::move(endpoints)),
      timeout_s_(timeout_s),
      deadline_(executor),
      watch_(std::make_shared<Watch>(Watch{&stream_.socket()})) {}

struct KeepAliveConnection::Disarm {
  KeepAliveConnection& connection;
  ~Disarm() { connection.disarm(); }
};

void KeepAliveConnection::arm() {
  const uint64_t armed = ++watch_->armed;
  deadline_.expires_after(bench_seconds(timeout_s_));
  deadline_.async_wait([watch = std::weak_ptr<Watch>(watch_), armed](const error_code& ec) {
    const std::shared_ptr<Watch> w = watch.lock();
    if (ec || !w || w->armed != armed) return;  // cancelled, re-armed, or the connection is gone
    w->timed_out = true;
    error_code ignored;
    w->socket->close(ignored);
  });
}

void KeepAliveConnection::disarm() {
  ++watch_->armed;
  deadline_.cancel();
}

void KeepAliveConnection::close() {
  error_code ignored;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  stream_.close();
  buffer_.clear();
}

net::awaitable<std::string> KeepAliveConnection::exchange(const HttpRequest& request, const ResponseSink& sink) {
  const Disarm disarm_on_return{*this};
  // Cleared once per exchange, not per arming: a deadline that closed the socket just as a
  // read succeeded still names the next operation's failure.
  watch_->timed_out = false;
  auto describe = [&](const char* during, const error_code& ec) {
    if (watch_->timed_out) return fmt::format("no data from the server for {:g} s ({})", timeout_s_, during);
    return fmt::format("{}: {}", during, ec.message());
  };
  error_code ec;
  for (int attempt = 0;; ++attempt) {
    const bool reused = stream_.socket().is_open();
    arm();
    if (!reused) {
      co_await stream_.async_connect(endpoints_, net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        close();
        co_return describe("connecting", ec);
      }
    }
    co_await http::async_write(stream_, request, net::redirect_error(net::use_awaitable, ec));
    const bool retry = reused && attempt == 0;
    if (ec) {
      close();
      if (retry && closed_by_peer(ec)) continue;
      co_return describe("sending the request", ec);
    }
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // streams end when the server says
    co_await http::async_read_header(stream_, buffer_, parser, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      const bool nothing_read = buffer_.size() == 0;
      close();
      if (retry && nothing_read && closed_by_peer(ec)) continue;
      co_return describe("reading the response header", ec);
    }
    sink.on_status(parser.get().result_int());
    char bytes[kReadBytes];
    while (!parser.is_done()) {
      parser.get().body().data = bytes;
      parser.get().body().size = sizeof bytes;
      arm();
      co_await http::async_read_some(stream_, buffer_, parser, net::redirect_error(net::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        close();
        co_return describe(closed_by_peer(ec) ? "connection closed mid-response" : "reading the response", ec);
      }
      const size_t n = sizeof bytes - parser.get().body().size;
      if (n > 0 && !sink.on_body(std::string_view(bytes, n))) {
        close();
        co_return std::string();
      }
    }
    if (!parser.keep_alive()) close();
    co_return std::string();
  }
}

}  // namespace optimate::bench
