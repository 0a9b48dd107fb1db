// FP8 linear layers against bf16 for cuda_decode_bench --quantization fp8: each Llama-3-8B
// projection (not lm_head, which stays bf16) at m = 1 to 2048 rows, through Fp8Gemm (the GEMV
// up to kFp8GemvMaxRows rows, then activation quantization + cuBLASLt FP8) and through Gemm in
// bf16, each over copies of the weights beyond L2. Microseconds, GB/s of the bytes each must
// move, TFLOP/s, and which FP8 path ran; up to kFp8GemvMaxRows rows also the cuBLASLt FP8 path
// the GEMV stands in for (fp8_cublaslt_us), to place the switch between them.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "cuda_bench_util.h"
#include "cuda_gemv_bench.h"
#include "backend/cuda/dummy_fill.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/fp8_quantize.h"
#include "backend/cuda/gemm.h"
#include "model/fp8_quant.h"

namespace optimate::cuda::bench {

inline nlohmann::json fp8_gemm_sweep(const ModelConfig& c) {
  nlohmann::json out = nlohmann::json::array();
  const int64_t max_m = 2048;
  Gemm gemm;
  Fp8Gemm fp8(max_m, std::max(c.hidden_size, c.intermediate_size));
  for (const Proj& pr : projections(c)) {
    if (std::string(pr.name) == "lm_head") continue;
    const int copies = 4;
    DeviceBuffer<__nv_bfloat16> w(copies * pr.n * pr.k), x(max_m * pr.k), y(max_m * pr.n);
    DeviceBuffer<uint8_t> codes(copies * pr.n * pr.k);
    DeviceBuffer<float> scales(copies * pr.n);
    dummy_fill(w.get(), w.size(), 1, 0, -0.05f, 0.05f);
    dummy_fill(x.get(), x.size(), 1, 1, -1.0f, 1.0f);
    quantize_fp8_rows(w.get(), copies * pr.n, pr.k, reinterpret_cast<__nv_fp8_e4m3*>(codes.get()), scales.get(),
                      nullptr);
    OPTIMATE_CUDA_CHECK(cudaDeviceSynchronize());
    for (int64_t m : {1, 2, 4, 8, 16, 64, 256, 1024, 2048}) {
      int i = 0;
      const double bf16_ms = time_events_ms([&](int) {
        gemm.linear(x.get(), w.get() + (i++ % copies) * pr.n * pr.k, nullptr, y.get(), GemmOutput::kBf16, m, pr.n,
                    pr.k, nullptr);
      }, 20);
      const double fp8_ms = time_events_ms([&](int) {
        const int64_t c_i = i++ % copies;
        const Fp8Weight fw{reinterpret_cast<const __nv_fp8_e4m3*>(codes.get() + c_i * pr.n * pr.k),
                           scales.get() + c_i * pr.n};
        fp8.linear(x.get(), fw, nullptr, y.get(), GemmOutput::kBf16, m, pr.n, pr.k, nullptr);
      }, 20);
      const char* path = m <= kFp8GemvMaxRows ? "gemv" : fp8.last_used_outer_scales() ? "cublaslt_outer" : "cublaslt_epilogue";
      // Where the GEMV takes over, the tensor-core path too (activations rounded), to place the switch.
      double cublas_ms = 0.0;
      if (m <= kFp8GemvMaxRows) {
        fp8.set_path(Fp8GemmPath::kOuterScales);
        cublas_ms = time_events_ms([&](int) {
          const int64_t c_i = i++ % copies;
          const Fp8Weight fw{reinterpret_cast<const __nv_fp8_e4m3*>(codes.get() + c_i * pr.n * pr.k),
                             scales.get() + c_i * pr.n};
          fp8.linear(x.get(), fw, nullptr, y.get(), GemmOutput::kBf16, m, pr.n, pr.k, nullptr);
        }, 20);
        fp8.set_path(Fp8GemmPath::kAuto);
      }
      const double flops = 2.0 * m * pr.n * pr.k;
      const double bf16_bytes = 2.0 * (pr.n * pr.k + m * pr.k + m * pr.n);
      const double fp8_bytes = 1.0 * pr.n * pr.k + 4.0 * pr.n + 2.0 * (m * pr.k + m * pr.n);
      out.push_back({{"gemm", pr.name}, {"m", m}, {"n", pr.n}, {"k", pr.k}, {"fp8_path", path},
                     {"bf16_us", bf16_ms * 1e3}, {"fp8_us", fp8_ms * 1e3},
                     {"bf16_gb_per_s", bf16_bytes / (bf16_ms * 1e-3) / 1e9},
                     {"fp8_gb_per_s", fp8_bytes / (fp8_ms * 1e-3) / 1e9},
                     {"bf16_tflop_per_s", flops / (bf16_ms * 1e-3) / 1e12},
                     {"fp8_tflop_per_s", flops / (fp8_ms * 1e-3) / 1e12}, {"fp8_cublaslt_us", cublas_ms * 1e3}});
    }
  }
  return out;
}

}  // namespace optimate::cuda::bench
