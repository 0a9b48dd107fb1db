#include "server/router.h"

#include <algorithm>

#include <boost/beast/core/string.hpp>

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

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Router::path_of(const HttpRequest& request) {
  std::string_view target(request.target().data(), request.target().size());
  // An absolute-form target (RFC 9112 3.2.2: "http://host/path", which servers must accept)
  // routes by its path.
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() >= scheme.size() &&
        boost::beast::iequals(boost::beast::string_view(target.data(), scheme.size()),
                              boost::beast::string_view(scheme.data(), scheme.size()))) {
      const size_t slash = target.find_first_of("/?", scheme.size());
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
      if (target.front() == '?') return "/";
      break;
    }
  }
  target = target.substr(0, target.find('?'));
  // Percent-encoded bytes route as the bytes they stand for (as the ASGI servers vLLM runs on
  // decode them); a '%' not followed by two hex digits stays as it is.
  std::string path;
  path.reserve(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    const int hi = target[i] == '%' && i + 2 < target.size() ? hex_digit(target[i + 1]) : -1;
    const int lo = hi >= 0 ? hex_digit(target[i + 2]) : -1;
    if (lo >= 0) {
      path += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      path += target[i];
    }
  }
  return path;
}

std::optional<std::string> Router::query_param(const HttpRequest& request, std::string_view name) {
  std::string_view target(request.target().data(), request.target().size());
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name)
      return std::string(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

void Router::add(http::verb method, std::string path, Handler handler) {
  exact_[std::move(path)][method] = std::move(handler);
}

void Router::add_prefix(http::verb method, std::string prefix, Handler handler) {
  prefixes_[std::move(prefix)][method] = std::move(handler);
}

bool Router::is_public(std::string_view path) {
  // vLLM's public endpoints: health probes, load, version and metrics scraping (exactly, or
  // below them on a segment boundary).
  for (std::string_view open : {"/health", "/ping", "/load", "/get_load", "/version", "/metrics"})
    if (path == open || (path.starts_with(open) && path[open.size()] == '/')) return true;
  return false;
}

bool Router::authorized(const HttpRequest& request) const {
  if (api_key_.empty()) return true;
  auto it = request.find(http::field::authorization);
  if (it == request.end()) return false;
  std::string_view value(it->value().data(), it->value().size());
  // "Bearer KEY", the scheme in any case (as vLLM reads it).
  const size_t space = value.find(' ');
  const std::string_view scheme = value.substr(0, space);
  if (space == std::string_view::npos ||
      !boost::beast::iequals(boost::beast::string_view(scheme.data(), scheme.size()), "bearer"))
    return false;
  value.remove_prefix(space + 1);
  // Compare every byte whatever the mismatch, so timing does not leak the key.
  unsigned diff = value.size() != api_key_.size();
  for (size_t i = 0; i < api_key_.size(); ++i)
    diff |= static_cast<unsigned char>(api_key_[i]) ^
            static_cast<unsigned char>(i < value.size() ? value[i] : 0);
  return diff == 0;
}

std::string Router::allowed_methods(const std::map<http::verb, Handler>& handlers) {
  std::vector<std::string> names;
  for (const auto& [method, handler] : handlers) names.emplace_back(http::to_string(method));
  if (handlers.count(http::verb::get) && !handlers.count(http::verb::head)) names.emplace_back("HEAD");
  names.emplace_back("OPTIONS");
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

const Router::Handlers* Router::handlers_for(const std::string& path) const {
  if (auto it = exact_.find(path); it != exact_.end()) return &it->second;
  const Handlers* handlers = nullptr;
  for (const auto& [prefix, hs] : prefixes_)
    if (path.starts_with(prefix) && path.size() > prefix.size()) handlers = &hs;
  return handlers;
}

// With --api-key every path needs it but the public ones; an unknown path outside /v1/ is a 404
// either way. OPTIONS needs no key, like vLLM's (browsers send none).
bool Router::refuses_key(const HttpRequest& request) const {
  if (request.method() == http::verb::options) return false;
  const std::string path = path_of(request);
  return (handlers_for(path) || path.starts_with("/v1/")) && !is_public(path) && !authorized(request);
}

void Router::route(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange) const {
  const std::string path = path_of(request);
  const Handlers* handlers = handlers_for(path);
  // OPTIONS asks what a path takes.
  if (request.method() == http::verb::options) {
    if (!handlers) send_error(*exchange, 404, "Not Found: " + path);
    else exchange->send(200, "text/plain; charset=utf-8", "", {{"Allow", allowed_methods(*handlers)}});
    return;
  }
  try {
    if (refuses_key(request)) {
      send_error(*exchange, 401, "Unauthorized: a valid API key is required");
      return;
    }
    if (!handlers) {
      send_error(*exchange, 404, "Not Found: " + path);
      return;
    }
    // HEAD is GET without the body (the connection drops it).
    auto method = request.method();
    if (method == http::verb::head && !handlers->count(method)) method = http::verb::get;
    auto handler = handlers->find(method);
    if (handler == handlers->end()) {
      exchange->send_json(405, error_body(405, "Method Not Allowed"),
                          {{"Allow", allowed_methods(*handlers)}});
      return;
    }
    handler->second(request, exchange);
  } catch (...) {
    send_exception(*exchange, std::current_exception(), std::string(request.method_string()) + " " + path);
  }
}

void send_exception(HttpExchange& exchange, std::exception_ptr error, const std::string& where) {
  try {
    std::rethrow_exception(error);
  } catch (const ApiError& e) {
    send_error(exchange, e.status(), e.message(), e.param(), e.retry_after_s());
  } catch (const Error& e) {
    int status = e.code() == ErrorCode::kInvalidArgument   ? 400
                 : e.code() == ErrorCode::kNotFound          ? 404
                 : e.code() == ErrorCode::kUnsupported       ? 400
                 : e.code() == ErrorCode::kResourceExhausted ? 503
                                                             : 500;
    if (status == 500) spdlog::error("{}: {}", where, e.what());
    send_error(exchange, status, without_absolute_paths(e.what()), {}, status == 503 ? 1 : 0);
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", where, e.what());
    send_error(exchange, 500, "Internal server error: " + without_absolute_paths(e.what()));
  } catch (...) {
    spdlog::error("{}: an unknown exception", where);
    send_error(exchange, 500, "Internal server error");
  }
}

}  // namespace optimate::server
