// Maps method + path to handlers, enforces --api-key, and turns ApiError (or any escaped
// exception) into an OpenAI error response so no request can take the server down. As in
// vLLM, with a key every path needs it (`Authorization: Bearer KEY`) but the public ones:
// /health, /ping, /load, /get_load, /version, /metrics, and OPTIONS anywhere (browsers send
// preflights without credentials).
// HEAD runs a path's GET handler (the connection sends no body); OPTIONS and 405 answers name
// the path's methods in `Allow`.
#pragma once

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <utility>

#include <boost/beast/http/verb.hpp>

#include "server/http_exchange.h"

namespace optimate::server {

using Handler = std::function<void(const HttpRequest&, const std::shared_ptr<HttpExchange>&)>;

class Router {
 public:
  explicit Router(std::string api_key = {}) : api_key_(std::move(api_key)) {}

  void add(boost::beast::http::verb method, std::string path, Handler handler);
  // Paths that start with `prefix` (for /v1/optimizers/NAME).
  void add_prefix(boost::beast::http::verb method, std::string prefix, Handler handler);

  void route(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange) const;
  // Whether route() answers 401 (the path needs the API key, and it is missing or wrong): the
  // headers decide, so a body need not be read first.
  bool refuses_key(const HttpRequest& request) const;

  // Strips the query string.
  static std::string path_of(const HttpRequest& request);
  // The value of `name` in the query string, as sent (no percent-decoding); nullopt if absent.
  static std::optional<std::string> query_param(const HttpRequest& request, std::string_view name);

 private:
  using Handlers = std::map<boost::beast::http::verb, Handler>;
  const Handlers* handlers_for(const std::string& path) const;
  bool authorized(const HttpRequest& request) const;
  static bool is_public(std::string_view path);
  static std::string allowed_methods(
      const std::map<boost::beast::http::verb, Handler>& handlers);

  std::string api_key_;
  std::map<std::string, std::map<boost::beast::http::verb, Handler>> exact_;
  std::map<std::string, std::map<boost::beast::http::verb, Handler>> prefixes_;
};

// Sends the OpenAI error JSON (with Retry-After when the error carries one).
void send_error(HttpExchange& exchange, int status, const std::string& message,
                const std::string& param = {}, int retry_after_s = 0);

// Answers with the error `error` holds: an ApiError as it says, an Error by its code (400 bad
// input, 404, 503 exhausted, 500 otherwise), anything else 500. `where` ("POST /v1/...")
// names the request in the server's log for a 500. Handlers that continue a request later
// (after a grammar compiles) answer their errors through this, as route() does.
void send_exception(HttpExchange& exchange, std::exception_ptr error, const std::string& where);

}  // namespace optimate::server
