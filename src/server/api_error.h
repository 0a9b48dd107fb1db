// Errors the HTTP API reports to clients, in OpenAI's JSON shape:
//   {"error": {"message": "...", "type": "BadRequestError", "param": "max_tokens", "code": 400}}
// `type` uses vLLM's names, `code` the HTTP status, so OpenAI SDKs map each status to their
// own exception class (400 BadRequestError, 401 AuthenticationError, 404 NotFoundError, ...).
//
// Messages often quote client input, which may hold a NUL: message() keeps the whole text,
// where what() (a C string) would stop at the first NUL.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace optimate::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {})
      : std::runtime_error(message), status_(status), message_(std::move(message)),
        param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& message() const { return message_; }
  const std::string& param() const { return param_; }
  // Seconds a client should wait before retrying (503 when the queue is full); 0 = no header.
  int retry_after_s() const { return retry_after_s_; }
  ApiError& with_retry_after(int seconds) {
    retry_after_s_ = seconds;
    return *this;
  }

 private:
  int status_;
  std::string message_;
  std::string param_;
  int retry_after_s_ = 0;
};

template <typename... Args>
[[noreturn]] void bad_request(std::string param, fmt::format_string<Args...> format, Args&&... args) {
  throw ApiError(400, fmt::format(format, std::forward<Args>(args)...), std::move(param));
}

// vLLM's error type name for an HTTP status.
const char* error_type_for_status(int status);

// The JSON body for an error response; a message past 1,000 bytes is cut short.
std::string error_body(int status, const std::string& message, const std::string& param = {});

// `text` with every absolute path ("/a/b/c") reduced to its last component ("c"): what an
// error from below the server says goes out without this machine's file layout.
std::string without_absolute_paths(std::string_view text);

}  // namespace optimate::server
