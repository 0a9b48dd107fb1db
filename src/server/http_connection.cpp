#include "server/http_connection.h"

#include <poll.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/api_error.h"
#include "server/cors.h"
#include "server/http_server.h"
#include "server/router.h"

namespace optimate::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

namespace {

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

std::string status_line(int status) {
  auto reason = http::obsolete_reason(static_cast<http::status>(status));
  return fmt::format("HTTP/1.1 {} {}\r\n", status, std::string_view(reason.data(), reason.size()));
}

// The exchange handed to handlers: forwards every call onto the connection's strand, tagged
// with its id so calls from an exchange that already ended are ignored.
class ConnectionExchange final : public HttpExchange {
 public:
  ConnectionExchange(std::shared_ptr<HttpConnection> connection, uint64_t id)
      : connection_(std::move(connection)), id_(id) {}

  void send(int status, std::string_view content_type, std::string body,
            std::vector<Header> headers) override {
    net::dispatch(connection_->executor(),
                  [c = connection_, id = id_, status, type = std::string(content_type),
                   body = std::move(body), headers = std::move(headers)]() mutable {
                    c->send(id, status, type, std::move(body), std::move(headers));
                  });
  }
  void start_events() override {
    net::dispatch(connection_->executor(), [c = connection_, id = id_] { c->start_events(id); });
  }
  void send_event(std::string framed) override {
    net::dispatch(connection_->executor(), [c = connection_, id = id_, f = std::move(framed)]() mutable {
      c->send_event(id, std::move(f));
    });
  }
  void finish_events() override {
    net::dispatch(connection_->executor(), [c = connection_, id = id_] { c->finish_events(id); });
  }
  void on_disconnect(std::function<void()> callback) override {
    net::dispatch(connection_->executor(), [c = connection_, id = id_, cb = std::move(callback)]() mutable {
      c->set_disconnect_callback(id, std::move(cb));
    });
  }
  void post(std::function<void()> fn) override { net::post(connection_->executor(), std::move(fn)); }

 private:
  std::shared_ptr<HttpConnection> connection_;
  uint64_t id_;
};

}  // namespace

HttpConnection::HttpConnection(net::ip::tcp::socket socket, HttpServer& server)
    : stream_(std::move(socket)),
      server_(server),
      options_(server.options()),
      read_timer_(stream_.get_executor()),
      hangup_timer_(stream_.get_executor()) {
  boost::system::error_code ec;
  const auto peer = stream_.socket().remote_endpoint(ec);
  remote_ = ec ? std::string("-") : fmt::format("{}:{}", peer.address().to_string(), peer.port());
}

void HttpConnection::start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
}

void HttpConnection::read_request() {
  if (closed_) return;
  if (server_.draining()) return close();
  parser_.emplace();
  parser_->body_limit(options_.max_body_bytes);
  parser_->header_limit(static_cast<std::uint32_t>(options_.max_header_bytes));
  read_timed_out_ = false;
  read_timer_.expires_after(seconds(options_.read_timeout_s));
  read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->closed_ || self->exchange_open_) return;
    self->read_timed_out_ = true;
    beast::error_code ignored;
    self->stream_.socket().cancel(ignored);
  });
  http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](
                                                          beast::error_code ec, size_t) {
    self->on_header(ec);
  });
}

void HttpConnection::on_header(beast::error_code ec) {
  if (closed_) return;
  if (ec) return on_read(ec);
  auto& header = parser_->get();
  // HTTP/1.1 requires a Host header (RFC 9112 3.2); h11, under the servers vLLM runs on, answers
  // 400 without one.
  if (header.version() == 11 && header.find(http::field::host) == header.end())
    return reject_and_close(400, "Missing mandatory Host: header");
  // Only "chunked" is a transfer coding this server decodes; a body in any other (gzip, chunked)
  // would be read as if plain: RFC 9112 answers 501.
  if (auto coding = header[http::field::transfer_encoding]; !coding.empty() && !beast::iequals(coding, "chunked"))
    return reject_and_close(501, fmt::format("Transfer-Encoding '{}' is not implemented: only chunked is",
                                             std::string_view(coding.data(), coding.size())));
  auto read_body = [self = shared_from_this()] {
    http::async_read(self->stream_, self->buffer_, *self->parser_,
                     [self](beast::error_code ec, size_t) { self->on_read(ec); });
  };
  // curl sends "Expect: 100-continue" for bodies over 1 KiB and waits a second for this.
  auto expect = header[http::field::expect];
  if (!parser_->is_done() && beast::iequals(expect, "100-continue") && server_.router().refuses_key(header)) {
    // Refused by its headers: answered at once, without asking for the body (which is then
    // discarded while the connection closes), so a client without the key uploads nothing.
    header.keep_alive(false);
    return handle(parser_->release());
  }
  if (!parser_->is_done() && beast::iequals(expect, "100-continue")) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(stream_, net::buffer(kContinue),
                     [self = shared_from_this(), read_body](beast::error_code ec, size_t) {
                       if (ec) return self->on_read(ec);
                       read_body();
                     });
    return;
  }
  if (parser_->is_done()) return on_read({});
  read_body();
}

void HttpConnection::on_read(beast::error_code ec) {
  read_timer_.cancel();
  if (closed_) return;
  if (read_timed_out_) {
    // Idle keep-alive connections just close; a request that started and never finished
    // sending gets told why.
    if (parser_->got_some()) return reject_and_close(408, "The request was not received in time.");
    return close();
  }
  if (ec == http::error::body_limit)
    return reject_and_close(413, fmt::format("The request body is larger than {} bytes.",
                                             options_.max_body_bytes));
  if (ec == http::error::header_limit)
    return reject_and_close(431, "The request headers are too large.");
  if (ec == http::error::end_of_stream || ec == net::error::eof ||
      ec == net::error::operation_aborted ||
      (ec && ec.category() == net::error::get_system_category()))
    return close();
  if (ec) return reject_and_close(400, "Malformed HTTP request: " + ec.message());
  handle(parser_->release());
}

void HttpConnection::handle(HttpRequest request) {
  ++exchange_id_;
  exchange_open_ = true;
  response_started_ = false;
  response_complete_ = false;
  keep_alive_ = request.keep_alive();
  head_only_ = request.method() == http::verb::head;
  close_delimited_ = false;
  on_disconnect_ = nullptr;
  begin_record(request);
  server_.exchange_started();
  watch();
  auto exchange = std::make_shared<ConnectionExchange>(shared_from_this(), exchange_id_);
  const bool preflight = Cors::is_preflight(request);
  cors_headers_ = preflight ? std::vector<Header>{} : server_.cors().response_headers(request);
  if (server_.draining()) {
    keep_alive_ = false;
    send_error(*exchange, 503, "The server is shutting down.", {}, 1);
    return;
  }
  if (preflight) {
    CorsPreflightAnswer answer = server_.cors().preflight(request);
    send(exchange_id_, answer.status, "text/plain; charset=utf-8", std::move(answer.body),
         std::move(answer.headers));
    return;
  }
  server_.router().route(request, exchange);
}

void HttpConnection::begin_record(const HttpRequest& request) {
  record_ = AccessRecord{remote_, std::string(request.method_string()), std::string(request.target()),
                         request.version(), 0, 0, 0.0};
  started_ = std::chrono::steady_clock::now();
  record_open_ = true;
}

void HttpConnection::write_record() {
  if (!record_open_) return;
  record_open_ = false;
  if (AccessLog* log = server_.access_log()) {
    record_.duration_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    log->write(record_);
  }
}

std::string HttpConnection::response_head(int status, std::string_view content_type,
                                           std::optional<size_t> content_length,
                                           const std::vector<Header>& headers) const {
  std::string out = status_line(status);
  out += fmt::format("Content-Type: {}\r\n", content_type);
  if (content_length) out += fmt::format("Content-Length: {}\r\n", *content_length);
  for (const auto& [name, value] : headers) out += fmt::format("{}: {}\r\n", name, value);
  for (const auto& [name, value] : cors_headers_) out += fmt::format("{}: {}\r\n", name, value);
  out += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return out;
}

// While a response is pending, keep one read outstanding: it completes at once when the
// client hangs up. Bytes of a pipelined next request are kept in buffer_ for the next parse;
// once kWatchBufferBytes of them are held, reading on would hold any amount, so the hang-up is
// looked for without reading instead.
void HttpConnection::watch() {
  if (watching_ || closed_) return;
  if (buffer_.size() >= kWatchBufferBytes) return poll_for_hangup();
  watching_ = true;
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](
                                                     beast::error_code ec, size_t bytes) {
    self->on_watch(ec, bytes);
  });
}

// Every kHangupPollInterval while an exchange is open: POLLRDHUP reports the client's FIN even
// behind bytes not read yet; a reset or a hang-up, POLLERR / POLLHUP.
void HttpConnection::poll_for_hangup() {
  if (polling_hangup_ || closed_) return;
  polling_hangup_ = true;
  hangup_timer_.expires_after(kHangupPollInterval);
  hangup_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    self->polling_hangup_ = false;
    if (ec || self->closed_ || !self->exchange_open_) return;
    pollfd fd{self->stream_.socket().native_handle(), POLLRDHUP, 0};
    if (::poll(&fd, 1, 0) > 0 && (fd.revents & (POLLRDHUP | POLLHUP | POLLERR))) return self->client_gone();
    self->poll_for_hangup();
  });
}

void HttpConnection::on_watch(beast::error_code ec, size_t bytes) {
  watching_ = false;
  if (closed_) return;
  if (lingering_) {
    // The linger's deadline did not reach a read that was pending when it was set.
    stream_.expires_after(std::chrono::seconds(2));
    return discard();
  }
  if (!ec) {
    buffer_.commit(bytes);
    if (exchange_open_) watch();
    else read_request();
    return;
  }
  if (ec == net::error::operation_aborted && !exchange_open_) return read_request();
  if (exchange_open_) return client_gone();
  close();
}

void HttpConnection::send(uint64_t id, int status, std::string_view content_type, std::string body,
                          std::vector<Header> headers) {
  if (!current(id) || response_started_) return;
  response_started_ = true;
  response_complete_ = true;
  if (server_.draining()) keep_alive_ = false;
  record_.status = status;
  // HEAD: the same headers, Content-Length included, and no body.
  record_.body_bytes = head_only_ ? 0 : body.size();
  std::string out = response_head(status, content_type, body.size(), headers);
  if (!head_only_) out += body;
  enqueue(std::move(out));
}

void HttpConnection::start_events(uint64_t id) {
  if (!current(id) || response_started_) return;
  response_started_ = true;
  streaming_ = true;
  server_.stream_started();
  record_.status = 200;
  // HTTP/1.0 has no chunked encoding: the body runs until the connection closes.
  close_delimited_ = record_.version < 11;
  if (close_delimited_) keep_alive_ = false;
  std::vector<Header> headers = {{"Cache-Control", "no-cache"}};
  if (!close_delimited_) headers.emplace_back("Transfer-Encoding", "chunked");
  enqueue(response_head(200, "text/event-stream; charset=utf-8", std::nullopt, headers));
}

void HttpConnection::send_event(uint64_t id, std::string framed) {
  if (!current(id) || !response_started_ || response_complete_ || framed.empty()) return;
  if (outbox_bytes_ > options_.max_pending_write_bytes) {
    spdlog::info("dropping a client that reads too slowly ({} bytes queued)", outbox_bytes_);
    return client_gone();
  }
  record_.body_bytes += framed.size();
  if (close_delimited_) enqueue(std::move(framed));
  else enqueue(fmt::format("{:x}\r\n{}\r\n", framed.size(), framed));
}

void HttpConnection::finish_events(uint64_t id) {
  if (!current(id) || !response_started_ || response_complete_) return;
  response_complete_ = true;
  streaming_ = false;
  server_.stream_finished();
  if (server_.draining()) keep_alive_ = false;
  if (!close_delimited_) return enqueue("0\r\n\r\n");
  // Nothing marks the end but the close: once the queued events are written.
  if (!writing_ && outbox_.empty()) finish_exchange();
}

void HttpConnection::set_disconnect_callback(uint64_t id, std::function<void()> callback) {
  if (current(id)) {
    if (!response_complete_) on_disconnect_ = std::move(callback);
  } else if (closed_ && id == exchange_id_) {
    callback();  // the client left before the handler got this far
  }
}

void HttpConnection::enqueue(std::string bytes) {
  outbox_bytes_ += bytes.size();
  outbox_.push_back(std::move(bytes));
  if (!writing_) write_next();
}

void HttpConnection::write_next() {
  if (closed_) return;
  if (written_ == in_flight_.size()) {
    // The last batch is out: coalesce everything queued into the next one (fewer syscalls
    // when a client lags a little).
    if (outbox_.empty()) return;
    in_flight_ = std::move(outbox_.front());
    written_ = 0;
    outbox_.pop_front();
    while (!outbox_.empty()) {
      in_flight_ += outbox_.front();
      outbox_.pop_front();
    }
  }
  // A batch goes out in as many writes as the client's reading takes, each with the timeout:
  // a client is dropped when it takes no byte for that long, not when a large response takes
  // it longer than that to read.
  writing_ = true;
  stream_.expires_after(seconds(options_.write_timeout_s));
  stream_.async_write_some(net::buffer(in_flight_.data() + written_, in_flight_.size() - written_),
                           [self = shared_from_this()](beast::error_code ec, size_t bytes) {
                             self->on_write(ec, bytes);
                           });
}

void HttpConnection::on_write(beast::error_code ec, size_t bytes) {
  writing_ = false;
  written_ += bytes;
  outbox_bytes_ -= std::min(outbox_bytes_, bytes);
  if (closed_) return;
  if (ec) return client_gone();
  if (written_ < in_flight_.size() || !outbox_.empty()) return write_next();
  in_flight_.clear();
  written_ = 0;
  stream_.expires_never();
  if (close_after_write_) return linger_then_close();
  if (exchange_open_ && response_complete_) finish_exchange();
}

void HttpConnection::finish_exchange() {
  write_record();
  exchange_open_ = false;
  on_disconnect_ = nullptr;
  server_.exchange_finished();
  if (!keep_alive_ || server_.draining()) return linger_then_close();
  if (watching_) {
    // The watch read completes with operation_aborted and then reads the next request.
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
    return;
  }
  read_request();
}

void HttpConnection::reject_and_close(int status, const std::string& message) {
  if (!record_open_) {
    // The request never arrived whole: no method or target to log.
    record_ = AccessRecord{remote_, "-", "-", 11, 0, 0, 0.0};
    started_ = std::chrono::steady_clock::now();
    record_open_ = true;
  }
  record_.status = status;
  keep_alive_ = false;
  close_after_write_ = true;
  std::string body = error_body(status, message);
  record_.body_bytes = body.size();
  enqueue(status_line(status) +
          fmt::format("Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                      body.size()) +
          body);
}

// Half-close and discard what the client is still sending (the rest of a 10 MB body) for a
// moment, so it reads our error response instead of a connection reset.
void HttpConnection::linger_then_close() {
  if (closed_ || lingering_) return;
  lingering_ = true;
  beast::error_code ignored;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  stream_.expires_after(std::chrono::seconds(2));
  if (watching_) {
    stream_.socket().cancel(ignored);  // on_watch continues with discard()
    return;
  }
  discard();
}

void HttpConnection::discard() {
  buffer_.consume(buffer_.size());
  stream_.async_read_some(buffer_.prepare(16384), [self = shared_from_this()](
                                                      beast::error_code ec, size_t) {
    if (ec || self->closed_) return self->close();
    self->discard();
  });
}

void HttpConnection::client_gone() {
  if (exchange_open_ && on_disconnect_) {
    auto callback = std::move(on_disconnect_);
    on_disconnect_ = nullptr;
    callback();
  }
  close();
}

void HttpConnection::close_if_idle() {
  if (!exchange_open_ && !close_after_write_) close();
}

void HttpConnection::force_close() { client_gone(); }

void HttpConnection::close() {
  if (closed_) return;
  closed_ = true;
  write_record();
  if (streaming_) {
    streaming_ = false;
    server_.stream_finished();
  }
  if (exchange_open_) {
    exchange_open_ = false;
    server_.exchange_finished();
  }
  on_disconnect_ = nullptr;
  read_timer_.cancel();
  hangup_timer_.cancel();
  beast::error_code ignored;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  stream_.close();
  server_.connection_closed(this);
}

}  // namespace optimate::server
