#include "backend/cuda/cuda_check.h"

#include "core/error.h"

namespace optimate::cuda {

void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line) {
  fail(ErrorCode::kInternal, "{}:{}: {} failed: {}", file, line, expr, cudaGetErrorString(status));
}

void throw_cublas_error(int status, const char* expr, const char* file, int line) {
  fail(ErrorCode::kInternal, "{}:{}: {} failed: cuBLAS status {}", file, line, expr, status);
}

void throw_shape_error(const char* func, const char* cond, const std::string& detail) {
  fail(ErrorCode::kInvalidArgument, "{}: shape check failed: {} ({})", func, cond, detail);
}

void throw_out_of_memory(const std::string& message) {
  throw Error(ErrorCode::kResourceExhausted, message);
}

void throw_unsupported(const std::string& message) { throw Error(ErrorCode::kUnsupported, message); }

}  // namespace optimate::cuda
