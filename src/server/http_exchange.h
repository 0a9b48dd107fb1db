// One HTTP request/response exchange as handlers see it. A handler may answer at once, or keep
// the exchange and answer later from any thread (an engine callback); everything is marshalled
// onto the connection's strand, and calls on an exchange whose client is gone do nothing.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace optimate::server {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using Header = std::pair<std::string, std::string>;

class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  // A whole response (Content-Length framed). Only the first response call of an exchange
  // counts.
  virtual void send(int status, std::string_view content_type, std::string body,
                    std::vector<Header> headers = {}) = 0;
  void send_json(int status, std::string body, std::vector<Header> headers = {}) {
    send(status, "application/json", std::move(body), std::move(headers));
  }

  // A server-sent event stream: 200, text/event-stream, chunked. send_event takes an already
  // framed event ("data: ...\n\n"); finish_events ends the response.
  virtual void start_events() = 0;
  virtual void send_event(std::string framed) = 0;
  virtual void finish_events() = 0;

  // Runs once, on the connection's strand, if the client goes away (or reads too slowly)
  // before the response is complete.
  virtual void on_disconnect(std::function<void()> callback) = 0;

  // Runs `fn` on the connection's strand, serialized with the exchange's own I/O.
  virtual void post(std::function<void()> fn) = 0;
};

}  // namespace optimate::server
