// The listening side of the HTTP front end: an acceptor and a small pool of threads running
// one io_context. Connections are asynchronous state machines, so thousands of concurrent
// streams cost memory, not threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "server/access_log.h"
#include "server/cors.h"
#include "server/http_options.h"

namespace optimate::server {

class Router;
class HttpConnection;

class HttpServer {
 public:
  HttpServer(HttpOptions options, const Router& router);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens (Error naming the address if that fails), then starts the threads.
  void start();
  uint16_t port() const { return bound_port_; }

  // Graceful shutdown, step 1: stop accepting, close idle keep-alive connections, answer new
  // requests on open connections with 503. Responses in progress continue.
  void begin_drain();
  bool draining() const { return draining_.load(); }
  int64_t active_exchanges() const { return active_exchanges_.load(); }
  // Event streams started and not yet ended (or cut).
  int64_t open_streams() const { return open_streams_.load(); }
  // Step 2 (after the drain deadline): drop every connection, then stop the threads.
  void close_all();
  void stop();

  boost::asio::io_context& io_context() { return ioc_; }
  const HttpOptions& options() const { return options_; }
  const Router& router() const { return router_; }
  const Cors& cors() const { return cors_; }
  AccessLog* access_log() { return access_log_.get(); }  // null unless --access-log

  // Bookkeeping called by connections.
  void exchange_started() { ++active_exchanges_; }
  void exchange_finished() { --active_exchanges_; }
  void stream_started() { ++open_streams_; }
  void stream_finished() { --open_streams_; }
  void connection_closed(HttpConnection* connection);

 private:
  void accept();

  HttpOptions options_;
  const Router& router_;
  Cors cors_;
  std::unique_ptr<AccessLog> access_log_;
  boost::asio::io_context ioc_;
  // Keeps the threads running between connections until stop().
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  boost::asio::strand<boost::asio::io_context::executor_type> accept_strand_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  uint16_t bound_port_ = 0;
  std::vector<std::thread> threads_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> active_exchanges_{0};
  std::atomic<int64_t> open_streams_{0};
  std::mutex connections_mutex_;
  std::unordered_map<HttpConnection*, std::weak_ptr<HttpConnection>> connections_;
};

}  // namespace optimate::server
