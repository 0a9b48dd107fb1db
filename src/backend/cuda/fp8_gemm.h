// FP8 linear layers: weights in e4m3 with one fp32 scale per output row (model/fp8_quant.h),
// activations in bf16. Up to kFp8GemvMaxRows rows go to the bandwidth-bound GEMV (gemv.h),
// which widens the codes in registers and keeps the activations as they are; wider steps round
// the activations to e4m3 per token (fp8_quantize.h; or take them rounded already by the kernel
// that produced them, linear_quantized) and multiply on FP8 tensor cores through
// cuBLASLt, with the row and token scales applied by cuBLASLt's outer-vector scaling or, where
// its heuristic offers no algorithm for that, by fp8_scale_outputs over fp32 sums.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/fp8_quantize.h"
#include "backend/cuda/gemm.h"

namespace optimate::cuda {

// Which kernels a call may take; kAuto picks by m. The others are for tests and benchmarks.
enum class Fp8GemmPath {
  kAuto,
  kGemv,           // the GEMV at any m <= kGemvMaxRows
  kOuterScales,    // cuBLASLt with the scales in its epilogue (falls back if it has no algorithm)
  kScaleEpilogue,  // cuBLASLt into fp32, then fp8_scale_outputs
};

class Fp8Gemm {
 public:
  // Activation scratch for up to max_rows x max_k (the widest step and input).
  Fp8Gemm(int64_t max_rows, int64_t max_k);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // Device bytes an Fp8Gemm of these bounds holds (the memory plan reserves them).
  static int64_t device_bytes(int64_t max_rows, int64_t max_k);

  // y[m, n] = x[m, k] . dequant(w)^T (+ bias[n]); x, bias bf16; y bf16 or fp32 row-major.
  void linear(const __nv_bfloat16* x, const Fp8Weight& w, const __nv_bfloat16* bias, void* y,
              GemmOutput out, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

  // The activation scratch linear rounds x into: up to max_rows x max_k codes and max_rows
  // scales. A kernel whose output feeds an FP8 linear may write it there itself
  // (rmsnorm_residual_fp8, silu_mul_fp8) and call linear_quantized.
  Fp8Activations activations() const;
  // linear over the m x k activations already in activations(): the FP8 GEMM without its
  // rounding pass. Only where linear would round them (fp8_rounds_activations(m, n), path not
  // kGemv), so both give the same bits.
  void linear_quantized(const Fp8Weight& w, const __nv_bfloat16* bias, void* y, GemmOutput out, int64_t m,
                        int64_t n, int64_t k, cudaStream_t stream);

  void set_path(Fp8GemmPath path) { path_ = path; }
  // Whether the latest cuBLASLt call applied the scales itself (tests report which ran).
  bool last_used_outer_scales() const { return last_outer_; }

 private:
  struct Plan {
    bool usable = false;  // the heuristic found an algorithm
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    int64_t rows = 0;  // the m the b and c layouts describe now
  };
  // (m or its bucket, n, k, output type, bias, exact m, outer scales)
  using Key = std::tuple<int64_t, int64_t, int64_t, int, bool, bool, bool>;
  Plan& plan(int64_t m, int64_t n, int64_t k, GemmOutput out, bool bias, bool exact, bool outer);
  // cuBLASLt over rows [0, m) of the quantized activations; false when it has no algorithm.
  bool matmul(const Plan& p, const void* a, const void* b, void* d, cudaStream_t stream);
  bool run_outer(const Fp8Weight& w, const __nv_bfloat16* bias, void* y, GemmOutput out, int64_t m,
                 int64_t n, int64_t k, cudaStream_t stream);
  // Widths cuBLASLt's FP8 kernels take, and m x k within the activation scratch.
  void check_gemm_shape(int64_t m, int64_t n, int64_t k) const;
  // The cuBLASLt product over the activation scratch's first m rows.
  void run_gemm(const Fp8Weight& w, const __nv_bfloat16* bias, void* y, GemmOutput out, int64_t m, int64_t n,
                int64_t k, cudaStream_t stream);
  void run_epilogue(const Fp8Weight& w, const __nv_bfloat16* bias, void* y, GemmOutput out, int64_t m,
                    int64_t n, int64_t k, cudaStream_t stream);

  int64_t max_rows_ = 0, max_k_ = 0;
  Fp8GemmPath path_ = Fp8GemmPath::kAuto;
  bool last_outer_ = false;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
  DeviceBuffer<uint8_t> x_codes_;   // [max_rows, max_k] e4m3
  DeviceBuffer<float> x_scales_;    // [max_rows]
  DeviceBuffer<float> sums_;        // fp32 sums of the scale-epilogue path, in row chunks
  std::map<Key, Plan> plans_;
};

}  // namespace optimate::cuda
