// Error type for everything that can fail on bad input: model files, configs, requests.
//
// Errors are exceptions carrying a code and a message that names the offending thing (file,
// tensor, field). Code at a boundary (CLI, HTTP server) catches them and turns them into an exit
// status or an HTTP error; nothing below that boundary swallows them.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace optimate {

enum class ErrorCode {
  kInvalidArgument,  // caller passed a bad value (request parameter, CLI flag)
  kInvalidFile,      // a model/tokenizer/config file is malformed or hostile
  kNotFound,         // a named file, tensor or key does not exist
  kUnsupported,      // valid input we deliberately do not handle (architecture, dtype)
  kResourceExhausted,// out of KV blocks, queue full, allocation refused
  kInternal,         // a broken invariant: a bug in Optimate
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

// Checks an internal invariant; a failure is a bug, reported with the location.
#define OPTIMATE_CHECK(cond, ...)                                                        \
  do {                                                                                   \
    if (!(cond))                                                                         \
      ::optimate::fail(::optimate::ErrorCode::kInternal, "{}:{}: check failed: {} {}",   \
                       __FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__));           \
  } while (0)

}  // namespace optimate
