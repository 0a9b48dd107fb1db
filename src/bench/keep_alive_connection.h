// One HTTP/1.1 keep-alive connection of the benchmark client, reused request after request.
// It hands a response on as it arrives (status, then body bytes of each read), so the caller
// can time-stamp every streamed chunk. Runs as C++20 coroutines on the caller's io_context.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>  // Boost 1.74's awaitable.hpp uses std::exchange without including it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "bench/bench_clock.h"

namespace optimate::bench {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;

struct ResponseSink {
  std::function<void(int)> on_status;
  // Returns false to abandon the response (the connection is then closed).
  std::function<bool(std::string_view)> on_body;
};

class KeepAliveConnection {
 public:
  KeepAliveConnection(const boost::asio::any_io_executor& executor,
                      boost::asio::ip::tcp::resolver::results_type endpoints, double timeout_s);
  // The deadline's handler holds the socket's address.
  KeepAliveConnection(KeepAliveConnection&&) = delete;
  KeepAliveConnection& operator=(KeepAliveConnection&&) = delete;

  // Connects when needed, sends `request` and streams the response into `sink`. Returns what
  // cut the exchange ("" when the response completed or the sink abandoned it). A reused
  // connection that the server had closed while idle is replaced once, before any byte of the
  // response, as HTTP clients do. The exchange fails when the server sends nothing for
  // `timeout_s` (on BenchClock) while connecting, sending, or between reads of the response.
  boost::asio::awaitable<std::string> exchange(const HttpRequest& request, const ResponseSink& sink);

 private:
  // What the deadline's handler may touch; it outlives no connection (the handler holds it weakly).
  struct Watch {
    boost::asio::ip::tcp::socket* socket = nullptr;
    uint64_t armed = 0;  // which arming the pending wait belongs to
    bool timed_out = false;
  };
  struct Disarm;

  void close();
  // Starts the timeout from now: when it passes first, the socket is closed under the pending
  // operation and timed_out set.
  void arm();
  void disarm();

  boost::beast::tcp_stream stream_;
  boost::asio::ip::tcp::resolver::results_type endpoints_;
  boost::beast::flat_buffer buffer_;
  double timeout_s_;
  BenchTimer deadline_;
  std::shared_ptr<Watch> watch_;
};

}  // namespace optimate::bench
