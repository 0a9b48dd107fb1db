// Cross-origin resource sharing (CORS) as vLLM's server does it (Starlette's CORSMiddleware):
// a preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered here, before
// routing and authentication, with 200 or 400 "Disallowed CORS ..."; every other request that
// carries an Origin gets the Access-Control-* headers on its response. Requests without an
// Origin are not cross-origin and get nothing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/http_exchange.h"
#include "server/http_options.h"

namespace optimate::server {

struct CorsPreflightAnswer {
  int status = 200;
  std::string body;
  std::vector<Header> headers;
};

class Cors {
 public:
  explicit Cors(const CorsOptions& options);

  static bool is_preflight(const HttpRequest& request);
  CorsPreflightAnswer preflight(const HttpRequest& request) const;
  // Headers for the response to a request that is not a preflight.
  std::vector<Header> response_headers(const HttpRequest& request) const;

 private:
  bool origin_allowed(std::string_view origin) const;

  std::vector<std::string> origins_;
  std::vector<std::string> methods_;
  std::vector<std::string> headers_;  // lower case, with the CORS-safelisted ones
  bool all_origins_;
  bool all_headers_;
  bool credentials_;
};

// A CORS flag's value: a JSON list of strings (vLLM's form, '["https://a.example"]') or
// comma-separated words. Error(kInvalidArgument) naming `flag` otherwise.
std::vector<std::string> parse_cors_list(std::string_view flag, std::string_view value);

}  // namespace optimate::server
