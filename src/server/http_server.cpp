#include "server/http_server.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "server/http_connection.h"

namespace optimate::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

HttpServer::HttpServer(HttpOptions options, const Router& router)
    : options_(std::move(options)),
      router_(router),
      cors_(options_.cors),
      access_log_(options_.access_log ? std::make_unique<AccessLog>(stderr) : nullptr),
      work_(ioc_.get_executor()),
      accept_strand_(net::make_strand(ioc_)),
      acceptor_(accept_strand_),
      accept_retry_(accept_strand_) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  boost::system::error_code ec;
  auto address = net::ip::make_address(options_.host, ec);
  if (ec) fail(ErrorCode::kInvalidArgument, "--host {}: not an IP address", options_.host);
  tcp::endpoint endpoint(address, options_.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    fail(ErrorCode::kInvalidArgument, "cannot listen on {}:{}: {}", options_.host, options_.port,
         ec.message());
  bound_port_ = acceptor_.local_endpoint().port();
  accept();
  int n = std::max(1, options_.num_threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { ioc_.run(); });
}

void HttpServer::accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [this](boost::system::error_code ec,
                                                        tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of file descriptors and the like: back off briefly instead of spinning.
      spdlog::warn("accept failed: {}", ec.message());
      accept_retry_.expires_after(std::chrono::milliseconds(50));
      accept_retry_.async_wait([this](boost::system::error_code wait_ec) {
        if (!wait_ec) accept();
      });
      return;
    }
    socket.set_option(tcp::no_delay(true), ec);
    auto connection = std::make_shared<HttpConnection>(std::move(socket), *this);
    {
      std::lock_guard lock(connections_mutex_);
      connections_.emplace(connection.get(), connection);
    }
    connection->start();
    accept();
  });
}

void HttpServer::connection_closed(HttpConnection* connection) {
  std::lock_guard lock(connections_mutex_);
  connections_.erase(connection);
}

void HttpServer::begin_drain() {
  if (draining_.exchange(true)) return;
  net::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
  });
  std::lock_guard lock(connections_mutex_);
  for (auto& [raw, weak] : connections_)
    if (auto c = weak.lock()) net::post(c->executor(), [c] { c->close_if_idle(); });
}

void HttpServer::close_all() {
  std::lock_guard lock(connections_mutex_);
  for (auto& [raw, weak] : connections_)
    if (auto c = weak.lock()) net::post(c->executor(), [c] { c->force_close(); });
}

void HttpServer::stop() {
  if (threads_.empty()) return;
  net::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
  });
  close_all();
  work_.reset();
  ioc_.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

}  // namespace optimate::server
