// One client connection: reads requests (HTTP/1.1 keep-alive), hands each to the router as an
// HttpExchange, writes whole or streamed (chunked SSE) responses from a queue, and watches the
// socket while a response is pending so a client that hangs up is noticed at once.
//
// HTTP rules kept here: a response to HEAD carries the headers of the GET response and never a
// body (the next response on the connection would be misread otherwise); a stream to an
// HTTP/1.0 client, which has no chunked encoding, is delimited by closing the connection; CORS
// preflights are answered before routing, and other cross-origin responses get their
// Access-Control-* headers.
//
// All state lives on the connection's strand; exchanges post onto it from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <chrono>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>

#include "server/access_log.h"
#include "server/http_exchange.h"
#include "server/http_options.h"

namespace optimate::server {

class Router;
class HttpServer;

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(boost::asio::ip::tcp::socket socket, HttpServer& server);
  void start();
  // Closes the connection if no exchange is in progress (used when draining).
  void close_if_idle();
  // Aborts whatever is in progress and closes (used at the end of a drain).
  void force_close();

  // Called by exchanges, on the strand.
  void send(uint64_t id, int status, std::string_view content_type, std::string body,
            std::vector<Header> headers);
  void start_events(uint64_t id);
  void send_event(uint64_t id, std::string framed);
  void finish_events(uint64_t id);
  void set_disconnect_callback(uint64_t id, std::function<void()> callback);
  boost::asio::any_io_executor executor() { return stream_.get_executor(); }

 private:
  void read_request();
  void on_header(boost::beast::error_code ec);
  void on_read(boost::beast::error_code ec);
  void handle(HttpRequest request);
  void begin_record(const HttpRequest& request);
  void write_record();
  // Status line and headers; no Content-Length for a stream.
  std::string response_head(int status, std::string_view content_type,
                            std::optional<size_t> content_length,
                            const std::vector<Header>& headers) const;
  void watch();
  void on_watch(boost::beast::error_code ec, size_t bytes);
  void poll_for_hangup();
  void enqueue(std::string bytes);
  void write_next();
  void on_write(boost::beast::error_code ec, size_t bytes);
  void finish_exchange();
  void reject_and_close(int status, const std::string& message);
  void linger_then_close();
  void discard();
  void client_gone();
  void close();
  bool current(uint64_t id) const { return id == exchange_id_ && exchange_open_ && !closed_; }

  boost::beast::tcp_stream stream_;
  HttpServer& server_;
  const HttpOptions& options_;
  boost::beast::flat_buffer buffer_;
  // Request reads use their own deadline rather than the stream's timeout, which would close
  // the socket before a 408 could be written.
  boost::asio::steady_timer read_timer_;
  bool read_timed_out_ = false;
  // Pipelined bytes held while a response is pending, past which the watch stops reading and
  // polls for the hang-up every kHangupPollInterval.
  static constexpr size_t kWatchBufferBytes = 64 * 1024;
  static constexpr std::chrono::milliseconds kHangupPollInterval{250};
  boost::asio::steady_timer hangup_timer_;
  bool polling_hangup_ = false;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;

  uint64_t exchange_id_ = 0;
  bool exchange_open_ = false;   // a request is being answered
  bool response_started_ = false;
  bool response_complete_ = false;  // the last bytes of the response are queued
  bool keep_alive_ = true;
  bool close_after_write_ = false;
  bool watching_ = false;
  bool lingering_ = false;
  bool writing_ = false;
  bool closed_ = false;
  bool head_only_ = false;        // the request is HEAD: headers only
  bool close_delimited_ = false;  // an HTTP/1.0 stream: raw events, then close
  bool streaming_ = false;        // events started and not finished (counted by the server)
  std::vector<Header> cors_headers_;  // for every response of the current exchange
  std::function<void()> on_disconnect_;

  // The current exchange, for the access log.
  std::string remote_;
  AccessRecord record_;
  std::chrono::steady_clock::time_point started_;
  bool record_open_ = false;

  std::deque<std::string> outbox_;
  size_t outbox_bytes_ = 0;
  std::string in_flight_;  // the batch being written
  size_t written_ = 0;     // of it, the bytes the client has taken
};

}  // namespace optimate::server
