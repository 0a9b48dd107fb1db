#include "server/router.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "server/api_error.h"

namespace optimate::server {

namespace http = boost::beast::http;

void send_error(HttpExchange& exchange, int status, const std::string& message,
                const std::string& param, int retry_after_s) {
  std::vector<Header> headers;
  if (retry_after_s > 0) headers.emplace_back("Retry-After", std::to_string(retry_after_s));
  if (status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  exchange.send_json(status, error_body(status, message, param), std::move(headers));
}

std::string Router::path_of(const HttpRequest& request) {
  std::string_view target(request.target().data(), request.target().size());
  return std::string(target.substr(0, target.find('?')));
}

void Router::add(http::verb method, std::string path, Handler handler) {
  exact_[std::move(path)][method] = std::move(handler);
}

void Router::add_prefix(http::verb method, std::string prefix, Handler handler) {
  prefixes_[std::move(prefix)][method] = std::move(handler);
}

bool Router::authorized(const HttpRequest& request) const {
  if (api_key_.empty()) return true;
  auto it = request.find(http::field::authorization);
  if (it == request.end()) return false;
  std::string_view value(it->value().data(), it->value().size());
  constexpr std::string_view kBearer = "Bearer ";
  if (!value.starts_with(kBearer)) return false;
  value.remove_prefix(kBearer.size());
  // Compare every byte whatever the mismatch, so timing does not leak the key.
  unsigned diff = value.size() != api_key_.size();
  for (size_t i = 0; i < api_key_.size(); ++i)
    diff |= static_cast<unsigned char>(api_key_[i]) ^
            static_cast<unsigned char>(i < value.size() ? value[i] : 0);
  return diff == 0;
}

void Router::route(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange) const {
  const std::string path = path_of(request);
  const std::map<http::verb, Handler>* handlers = nullptr;
  if (auto it = exact_.find(path); it != exact_.end()) {
    handlers = &it->second;
  } else {
    for (const auto& [prefix, hs] : prefixes_)
      if (path.starts_with(prefix) && path.size() > prefix.size()) handlers = &hs;
  }
  try {
    if (path.starts_with("/v1/") && !authorized(request)) {
      send_error(*exchange, 401, "Unauthorized: a valid API key is required");
      return;
    }
    if (!handlers) {
      send_error(*exchange, 404, "Not Found: " + path);
      return;
    }
    auto handler = handlers->find(request.method());
    if (handler == handlers->end()) {
      send_error(*exchange, 405, "Method Not Allowed");
      return;
    }
    handler->second(request, exchange);
  } catch (const ApiError& e) {
    send_error(*exchange, e.status(), e.what(), e.param(), e.retry_after_s());
  } catch (const Error& e) {
    int status = e.code() == ErrorCode::kInvalidArgument   ? 400
                 : e.code() == ErrorCode::kNotFound          ? 404
                 : e.code() == ErrorCode::kUnsupported       ? 400
                 : e.code() == ErrorCode::kResourceExhausted ? 503
                                                             : 500;
    if (status == 500) spdlog::error("{} {}: {}", std::string(request.method_string()), path, e.what());
    send_error(*exchange, status, e.what(), {}, status == 503 ? 1 : 0);
  } catch (const std::exception& e) {
    spdlog::error("{} {}: {}", std::string(request.method_string()), path, e.what());
    send_error(*exchange, 500, std::string("Internal server error: ") + e.what());
  }
}

}  // namespace optimate::server
