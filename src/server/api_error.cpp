#include "server/api_error.h"

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

std::string error_body(int status, const std::string& message, const std::string& param) {
  nlohmann::json error = {{"message", message},
                          {"type", error_type_for_status(status)},
                          {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                          {"code", status}};
  return nlohmann::json{{"error", std::move(error)}}.dump(-1, ' ', false,
                                                          nlohmann::json::error_handler_t::replace);
}

}  // namespace optimate::server
