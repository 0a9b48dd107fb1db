#include "server/api_error.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

namespace optimate::server {

const char* error_type_for_status(int status) {
  switch (status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 403: return "PermissionDeniedError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowedError";
    case 408: return "RequestTimeoutError";
    case 413: return "RequestTooLargeError";
    case 415: return "UnsupportedMediaTypeError";
    case 429: return "RateLimitError";
    case 431: return "RequestHeaderFieldsTooLargeError";
    case 501: return "NotImplementedError";
    case 503: return "ServiceUnavailableError";
    default: return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

namespace {

constexpr size_t kMaxMessageBytes = 1000;

bool path_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '.' || c == '_' || c == '-' || c == '+' ||
         c == '~' || c == '@';
}

std::string clean_message(const std::string& out) {
  if (out.size() <= kMaxMessageBytes) return out;
  size_t cut = kMaxMessageBytes;
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8
  return out.substr(0, cut) + "...";
}

}  // namespace

std::string without_absolute_paths(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    // A path starts with '/' at the start of a word and has at least two components.
    const bool word_start = i == 0 || std::isspace(static_cast<unsigned char>(text[i - 1])) ||
                            std::string_view("'\"`(=[,").find(text[i - 1]) != std::string_view::npos;
    if (text[i] == '/' && word_start && i + 1 < text.size() && path_char(text[i + 1]) && text[i + 1] != '/') {
      size_t end = i;
      while (end < text.size() && path_char(text[end])) ++end;
      std::string_view path = text.substr(i, end - i);
      while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
      if (std::count(path.begin(), path.end(), '/') >= 2) {
        out += path.substr(path.rfind('/') + 1);
        i = end;
        continue;
      }
    }
    out += text[i++];
  }
  return out;
}

std::string error_body(int status, const std::string& message, const std::string& param) {
  nlohmann::json error = {{"message", clean_message(message)},
                          {"type", error_type_for_status(status)},
                          {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                          {"code", status}};
  return nlohmann::json{{"error", std::move(error)}}.dump(-1, ' ', false,
                                                          nlohmann::json::error_handler_t::replace);
}

}  // namespace optimate::server
