// Linear layers through cuBLASLt: bf16 operands, fp32 accumulation.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/device_buffer.h"

namespace optimate::cuda {

enum class GemmOutput { kBf16, kF32 };

// The small-m kernel beats cuBLASLt only up to this many rows: whole decode steps of 3, 4 and 8
// rows through it took 7.0, 7.1 and 11.4 ms on an H200, and 5.3, 5.3 and 5.6 ms through
// cuBLASLt. Its time grows with m far faster than its bytes do; why is not yet profiled.
inline constexpr int64_t kGemvFasterRows = 2;

// The m whose cuBLASLt algorithm serves every m of its bucket: exact up to 16 rows, then
// multiples of 16 up to 256, of 64 up to 2048, of 256 past that.
int64_t gemm_algo_rows(int64_t m);

// Sets a cuBLASLt layout's column count (a cached plan reused for another row count of its
// bucket).
void gemm_set_cols(cublasLtMatrixLayout_t layout, int64_t cols);

// Owns the cuBLASLt handle, a workspace, and one cached plan (descriptors + algorithm) per
// problem shape, so steady-state calls (and CUDA graph capture) do no heuristic search.
class Gemm {
 public:
  explicit Gemm(size_t workspace_bytes = size_t{32} << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[m, n] = x[m, k] . w[n, k]^T (+ bias[n]). x, w, bias bf16 row-major (w in the Linear
  // [out_features, in_features] layout); y row-major bf16 or fp32. Up to kGemvFasterRows rows
  // go to the bandwidth-bound kernel of gemv.h unless set_small_m_kernel(false).
  void linear(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, void* y,
              GemmOutput out, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

  // Routes small-m calls to cuBLASLt too (benchmarks compare the two paths).
  void set_small_m_kernel(bool enabled) { use_gemv_ = enabled; }

 private:
  // One cuBLASLt algorithm per bucket of m (algo_rows): asking the heuristic costs milliseconds,
  // and a decode batch that shrinks by a few sequences per step would otherwise ask every step.
  // The layouts are resized to the m of each call.
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    int64_t rows = 0;  // the m the b and c layouts describe now
  };
  // (m or its bucket, n, k, output type, bias, exact m)
  using Key = std::tuple<int64_t, int64_t, int64_t, int, bool, bool>;
  bool use_gemv_ = true;
  Plan& plan(int64_t m, int64_t n, int64_t k, GemmOutput out, bool bias, bool exact);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
  std::map<Key, Plan> plans_;
};

}  // namespace optimate::cuda
