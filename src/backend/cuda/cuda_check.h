// Turns CUDA runtime and cuBLAS status codes into optimate::Error, naming the call and place,
// so a failed launch surfaces at the launcher that caused it instead of at a later sync.
//
// This header stays free of fmt (and so of core/error.h): nvcc's front end and its host pass
// reject fmt's constexpr/consteval machinery, so .cu files format with format_braces and
// throw through functions compiled by the host compiler (cuda_check.cpp).
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace optimate::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* expr, const char* file, int line);
// ErrorCode::kInvalidArgument, for launcher shape checks.
[[noreturn]] void throw_shape_error(const char* func, const char* cond, const std::string& detail);
// ErrorCode::kResourceExhausted, for refused allocations.
[[noreturn]] void throw_out_of_memory(const std::string& message);
// ErrorCode::kUnsupported, for a GPU that lacks what a kernel needs.
[[noreturn]] void throw_unsupported(const std::string& message);

// Replaces each "{}" of `format` with the next argument, streamed.
inline void format_braces_into(std::ostringstream& os, std::string_view format) { os << format; }
template <typename T, typename... Rest>
void format_braces_into(std::ostringstream& os, std::string_view format, const T& first,
                        const Rest&... rest) {
  const size_t at = format.find("{}");
  if (at == std::string_view::npos) {
    os << format;
    return;
  }
  os << format.substr(0, at) << first;
  format_braces_into(os, format.substr(at + 2), rest...);
}
template <typename... Args>
std::string format_braces(std::string_view format, const Args&... args) {
  std::ostringstream os;
  format_braces_into(os, format, args...);
  return os.str();
}

}  // namespace optimate::cuda

#define OPTIMATE_CUDA_CHECK(expr)                                                  \
  do {                                                                             \
    const cudaError_t _status = (expr);                                            \
    if (_status != cudaSuccess)                                                    \
      ::optimate::cuda::throw_cuda_error(_status, #expr, __FILE__, __LINE__);      \
  } while (0)

// After a kernel launch: reports bad launch configurations at once.
#define OPTIMATE_CUDA_CHECK_LAUNCH(kernel_name)                                        \
  do {                                                                                 \
    const cudaError_t _status = cudaGetLastError();                                    \
    if (_status != cudaSuccess)                                                        \
      ::optimate::cuda::throw_cuda_error(_status, kernel_name, __FILE__, __LINE__);    \
  } while (0)

#define OPTIMATE_CUBLAS_CHECK(expr)                                                          \
  do {                                                                                       \
    const cublasStatus_t _status = (expr);                                                   \
    if (_status != CUBLAS_STATUS_SUCCESS)                                                    \
      ::optimate::cuda::throw_cublas_error(static_cast<int>(_status), #expr, __FILE__, __LINE__); \
  } while (0)

// A launcher's shape check: a failure is a caller bug, reported with the values.
#define OPTIMATE_SHAPE_CHECK(cond, ...)                                                      \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::optimate::cuda::throw_shape_error(__func__, #cond,                                   \
                                          ::optimate::cuda::format_braces(__VA_ARGS__));     \
  } while (0)
