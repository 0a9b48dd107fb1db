#include "server/cors.h"

#include <algorithm>
#include <cctype>

#include <boost/beast/http/field.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace optimate::server {

namespace http = boost::beast::http;

namespace {

constexpr int kMaxAgeS = 600;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

bool contains(const std::vector<std::string>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

std::string field(const HttpRequest& request, std::string_view name) {
  auto it = request.find(boost::beast::string_view(name.data(), name.size()));
  return it == request.end() ? std::string() : std::string(it->value());
}

}  // namespace

Cors::Cors(const CorsOptions& o)
    : origins_(o.allowed_origins),
      all_origins_(contains(o.allowed_origins, "*")),
      all_headers_(contains(o.allowed_headers, "*")),
      credentials_(o.allow_credentials) {
  methods_ = contains(o.allowed_methods, "*")
                 ? std::vector<std::string>{"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"}
                 : o.allowed_methods;
  std::vector<std::string> headers = {"accept", "accept-language", "content-language", "content-type"};
  for (const auto& h : o.allowed_headers)
    if (h != "*" && !contains(headers, lower(h))) headers.push_back(lower(h));
  std::sort(headers.begin(), headers.end());
  headers_ = std::move(headers);
}

bool Cors::is_preflight(const HttpRequest& request) {
  return request.method() == http::verb::options && request.find(http::field::origin) != request.end() &&
         request.find("Access-Control-Request-Method") != request.end();
}

bool Cors::origin_allowed(std::string_view origin) const {
  return all_origins_ || contains(origins_, origin);
}

CorsPreflightAnswer Cors::preflight(const HttpRequest& request) const {
  CorsPreflightAnswer answer;
  const std::string origin = field(request, "Origin");
  const std::string method = field(request, "Access-Control-Request-Method");
  const auto requested_headers = request.find("Access-Control-Request-Headers");
  // With credentials a browser refuses "*", so the origin is echoed instead.
  const bool echo_origin = !all_origins_ || credentials_;
  std::vector<std::string> failures;
  if (!origin_allowed(origin)) failures.push_back("origin");
  else answer.headers.emplace_back("Access-Control-Allow-Origin", echo_origin ? origin : "*");
  if (echo_origin) answer.headers.emplace_back("Vary", "Origin");
  answer.headers.emplace_back("Access-Control-Allow-Methods", fmt::format("{}", fmt::join(methods_, ", ")));
  answer.headers.emplace_back("Access-Control-Max-Age", std::to_string(kMaxAgeS));
  if (!contains(methods_, method)) failures.push_back("method");
  if (requested_headers != request.end() && all_headers_) {
    answer.headers.emplace_back("Access-Control-Allow-Headers", std::string(requested_headers->value()));
  } else {
    if (!all_headers_)
      answer.headers.emplace_back("Access-Control-Allow-Headers", fmt::format("{}", fmt::join(headers_, ", ")));
    if (requested_headers != request.end()) {
      std::string_view list(requested_headers->value().data(), requested_headers->value().size());
      for (size_t start = 0; start <= list.size();) {
        size_t end = std::min(list.find(',', start), list.size());
        if (!contains(headers_, lower(trim(list.substr(start, end - start))))) {
          failures.push_back("headers");
          break;
        }
        start = end + 1;
      }
    }
  }
  if (credentials_) answer.headers.emplace_back("Access-Control-Allow-Credentials", "true");
  if (failures.empty()) {
    answer.body = "OK";
  } else {
    answer.status = 400;
    answer.body = fmt::format("Disallowed CORS {}", fmt::join(failures, ", "));
  }
  return answer;
}

std::vector<Header> Cors::response_headers(const HttpRequest& request) const {
  std::vector<Header> out;
  const auto it = request.find(http::field::origin);
  if (it == request.end()) return out;
  const std::string origin(it->value());
  if (all_origins_ && !credentials_) {
    out.emplace_back("Access-Control-Allow-Origin", "*");
  } else if (origin_allowed(origin)) {
    out.emplace_back("Access-Control-Allow-Origin", origin);
    out.emplace_back("Vary", "Origin");
  }
  if (credentials_) out.emplace_back("Access-Control-Allow-Credentials", "true");
  return out;
}

std::vector<std::string> parse_cors_list(std::string_view flag, std::string_view value) {
  std::vector<std::string> out;
  const std::string text = trim(value);
  if (text.starts_with("[")) {
    const auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_array())
      fail(ErrorCode::kInvalidArgument, "{}: not a JSON list of strings: {}", flag, text);
    for (const auto& item : parsed) {
      if (!item.is_string())
        fail(ErrorCode::kInvalidArgument, "{}: not a JSON list of strings: {}", flag, text);
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  for (size_t start = 0; start <= text.size();) {
    size_t end = std::min(text.find(',', start), text.size());
    std::string item = trim(std::string_view(text).substr(start, end - start));
    if (!item.empty()) out.push_back(std::move(item));
    start = end + 1;
  }
  return out;
}

}  // namespace optimate::server
