// The decode GEMV kernels side by side for cuda_decode_bench (--only gemv runs just these):
// each GemvKernel, bf16 and FP8 weights, each Llama-3-8B projection plain and as the decode
// layer fuses it, m = 1, 2, 4, 8 rows; then each kernel's splits of k at one row; then the
// whole model's weight streaming per kernel and weight type. Every figure is microseconds per
// launch in a graph of back-to-back launches over distinct weight copies (beyond L2, with
// programmatic launch as in a decode step), the GB/s of the bytes the launch must move and
// that as a share of the copy rate measured in the same run. A table goes to stdout as well.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda_bench_util.h"
#include "cuda_gemv_bench.h"
#include "backend/cuda/dummy_fill.h"
#include "backend/cuda/fp8_quantize.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/programmatic_launch.h"

namespace optimate::cuda::bench {

// One projection's weights as bf16 and as e4m3 codes + row scales, `copies` times over.
struct GemvWeights {
  int64_t n, k, copies;
  DeviceBuffer<__nv_bfloat16> bf16;
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> scales;
  GemvWeights(int64_t n_, int64_t k_, int64_t copies_)
      : n(n_), k(k_), copies(copies_), bf16(copies_ * n_ * k_), codes(copies_ * n_ * k_), scales(copies_ * n_) {
    dummy_fill(bf16.get(), bf16.size(), 3, 0, -0.05f, 0.05f);
    quantize_fp8_rows(bf16.get(), copies * n, k, reinterpret_cast<__nv_fp8_e4m3*>(codes.get()), scales.get(), nullptr);
    OPTIMATE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void point(GemvParams& p, int64_t i, bool fp8) const {
    p.w = fp8 ? nullptr : bf16.get() + i * n * k;
    p.w_fp8 = fp8 ? reinterpret_cast<const __nv_fp8_e4m3*>(codes.get()) + i * n * k : nullptr;
    p.w_scale = fp8 ? scales.get() + i * n : nullptr;
  }
};

// How a projection runs: plain (x in, bf16 out) or as the fused decode layer runs it.
enum class GemvForm { kPlain, kFused };

// The inputs and outputs every measured launch shares (sized for the widest shape, 8 rows).
struct GemvIo {
  DeviceBuffer<__nv_bfloat16> x, y, norm_weight;
  DeviceBuffer<float> residual_in, residual_out;
  explicit GemvIo(const ModelConfig& c)
      : x(8 * c.intermediate_size), y(8 * c.vocab_size), norm_weight(c.hidden_size),
        residual_in(8 * c.hidden_size), residual_out(8 * c.hidden_size) {
    dummy_fill(x.get(), x.size(), 4, 1, -1.0f, 1.0f);
    dummy_fill(norm_weight.get(), norm_weight.size(), 4, 2, 0.5f, 1.5f);
    OPTIMATE_CUDA_CHECK(cudaMemset(residual_in.get(), 0, residual_in.bytes()));
    OPTIMATE_CUDA_CHECK(cudaMemset(residual_out.get(), 0, residual_out.bytes()));
  }
  // The fused form: RMSNorm input for the projections that read the residual stream (qkv,
  // gate_up), SiLU*mul after gate_up, the residual add after o and down.
  void set(GemvParams& p, const std::string& proj, GemvForm form) const {
    p.x = x.get();
    p.y = y.get();
    p.epilogue = GemvEpilogue::kStoreBf16;
    if (form == GemvForm::kPlain) return;
    if (proj == "qkv" || proj == "gate_up") {
      p.input = GemvInput::kRmsNorm;
      p.residual_in = residual_in.get();
      p.norm_weight = norm_weight.get();
    }
    if (proj == "gate_up") p.epilogue = GemvEpilogue::kSiluMul;
    if (proj == "o" || proj == "down") {
      p.epilogue = GemvEpilogue::kAddResidual;
      p.residual_out = residual_out.get();
      p.y = nullptr;
    }
  }
};

// Microseconds per launch of p over every weight copy in one graph.
inline double gemv_us(GemvParams p, const GemvWeights& w, bool fp8, cudaStream_t s) {
  cudaGraphExec_t g = capture(s, [&] {
    for (int64_t i = 0; i < w.copies; ++i) {
      w.point(p, i, fp8);
      gemv(p, s);
    }
  });
  const double us = replay_ms(g, s, 10) * 1e3 / static_cast<double>(w.copies);
  cudaGraphExecDestroy(g);
  return us;
}

// The bytes a launch must move: weights (+ scales), x or the residual rows, the outputs.
inline double gemv_bytes(const GemvParams& p, bool fp8) {
  const double weights = fp8 ? 1.0 * p.n * p.k + 4.0 * p.n : 2.0 * p.n * p.k;
  const double in = p.input == GemvInput::kRmsNorm ? 4.0 * p.m * p.k : 2.0 * p.m * p.k;
  const double out = p.epilogue == GemvEpilogue::kAddResidual ? 8.0 * p.m * p.n
                     : p.epilogue == GemvEpilogue::kSiluMul  ? 1.0 * p.m * p.n
                                                              : 2.0 * p.m * p.n;
  return weights + in + out;
}

inline nlohmann::json gemv_kernel_sweep(const ModelConfig& c, double copy_gbs, const std::vector<GemvKernel>& kernels,
                                        const std::vector<int64_t>& rows) {
  nlohmann::json out;
  cudaStream_t s;
  OPTIMATE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  set_programmatic_launch(true);
  GemvIo io(c);
  std::printf("%-8s %-5s %-8s %-6s %2s %5s %9s %8s %6s\n", "kernel", "w", "proj", "form", "m", "split", "us", "GB/s",
              "%copy");
  for (const Proj& pr : projections(c)) {
    const std::string proj = pr.name;
    const int64_t copies = std::max<int64_t>(2, (400 << 20) / (2 * pr.n * pr.k) + 1);
    const GemvWeights w(pr.n, pr.k, copies);
    auto measure = [&](GemvKernel kernel, bool fp8, GemvForm form, int64_t m, int split) {
      GemvParams p;
      p.kernel = kernel;
      p.m = m;
      p.n = pr.n;
      p.k = pr.k;
      p.split_k = split;
      io.set(p, proj, form);
      const double us = gemv_us(p, w, fp8, s);
      const double gbs = gemv_bytes(p, fp8) / (us * 1e-6) / 1e9;
      const char* form_name = form == GemvForm::kPlain ? "plain" : "fused";
      // The automatic split (marked *) as the kernel picks it for one row.
      const int shown = split == 0 ? gemv_auto_split(pr.n, pr.k, kernel, fp8) : split;
      std::printf("%-8s %-5s %-8s %-6s %2lld %4d%s %9.2f %8.0f %5.1f%%\n", gemv_kernel_name(kernel),
                  fp8 ? "fp8" : "bf16", proj.c_str(), form_name, static_cast<long long>(m), shown, split == 0 ? "*" : " ",
                  us, gbs, 100.0 * gbs / copy_gbs);
      std::fflush(stdout);
      return nlohmann::json{{"kernel", gemv_kernel_name(kernel)}, {"weights", fp8 ? "fp8" : "bf16"},
                            {"gemm", proj}, {"form", form_name}, {"m", m}, {"split", shown}, {"auto", split == 0}, {"us", us},
                            {"gb_per_s", gbs}, {"fraction_of_copy", gbs / copy_gbs}};
    };
    for (GemvKernel kernel : kernels)
      for (bool fp8 : {false, true})
        for (GemvForm form : {GemvForm::kPlain, GemvForm::kFused}) {
          if (form == GemvForm::kFused && proj == "lm_head") continue;
          for (int64_t m : rows) out["shapes"].push_back(measure(kernel, fp8, form, m, 0));
        }
    for (GemvKernel kernel : kernels)
      for (bool fp8 : {false, true})
        for (int split : {1, 2, 4, 8}) out["splits_m1"].push_back(measure(kernel, fp8, GemvForm::kPlain, 1, split));
  }
  cudaStreamDestroy(s);
  return out;
}

// The model's weight streaming alone per kernel and weight type: 32 layers x 4 projections
// (fused forms) + lm_head (bf16, as the runner keeps it), m = 1, one graph.
inline nlohmann::json gemv_kernel_chain(const ModelConfig& c, double copy_gbs, const std::vector<GemvKernel>& kernels) {
  const std::vector<Proj> pr = projections(c);
  int64_t per_layer = 0;
  for (int i = 0; i < 4; ++i) per_layer += pr[i].n * pr[i].k;
  const int64_t body = per_layer * c.num_layers, head = pr[4].n * pr[4].k;
  DeviceBuffer<__nv_bfloat16> w(body + head);
  DeviceBuffer<uint8_t> codes(body);
  DeviceBuffer<float> scales(c.num_layers * (pr[0].n + pr[1].n + pr[2].n + pr[3].n));
  dummy_fill(w.get(), w.size(), 5, 0, -0.05f, 0.05f);
  {
    int64_t at = 0, scale_at = 0;
    for (int64_t l = 0; l < c.num_layers; ++l)
      for (int i = 0; i < 4; ++i) {
        quantize_fp8_rows(w.get() + at, pr[i].n, pr[i].k, reinterpret_cast<__nv_fp8_e4m3*>(codes.get()) + at,
                          scales.get() + scale_at, nullptr);
        at += pr[i].n * pr[i].k;
        scale_at += pr[i].n;
      }
  }
  OPTIMATE_CUDA_CHECK(cudaDeviceSynchronize());
  GemvIo io(c);
  cudaStream_t s;
  OPTIMATE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  set_programmatic_launch(true);
  nlohmann::json out = nlohmann::json::array();
  for (GemvKernel kernel : kernels)
    for (bool fp8 : {false, true}) {
      double bytes = 0;
      cudaGraphExec_t g = capture(s, [&] {
        int64_t at = 0, scale_at = 0;
        for (int64_t l = 0; l <= c.num_layers; ++l)
          for (int i = (l == c.num_layers ? 4 : 0); i < (l == c.num_layers ? 5 : 4); ++i) {
            const bool layer_fp8 = fp8 && i < 4;
            GemvParams p;
            p.kernel = kernel;
            p.m = 1;
            p.n = pr[i].n;
            p.k = pr[i].k;
            io.set(p, pr[i].name, i < 4 ? GemvForm::kFused : GemvForm::kPlain);
            p.w = layer_fp8 ? nullptr : w.get() + at;
            p.w_fp8 = layer_fp8 ? reinterpret_cast<const __nv_fp8_e4m3*>(codes.get()) + at : nullptr;
            p.w_scale = layer_fp8 ? scales.get() + scale_at : nullptr;
            gemv(p, s);
            bytes += gemv_bytes(p, layer_fp8);
            at += pr[i].n * pr[i].k;
            scale_at += pr[i].n;
          }
      });
      const double ms = replay_ms(g, s, 10);
      cudaGraphExecDestroy(g);
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf("chain %-8s %-5s %8.3f ms %8.0f GB/s %5.1f%% of copy\n", gemv_kernel_name(kernel),
                  fp8 ? "fp8" : "bf16", ms, gbs, 100.0 * gbs / copy_gbs);
      std::fflush(stdout);
      out.push_back({{"kernel", gemv_kernel_name(kernel)}, {"weights", fp8 ? "fp8" : "bf16"}, {"ms", ms},
                     {"bytes", bytes}, {"gb_per_s", gbs}, {"fraction_of_copy", gbs / copy_gbs}});
    }
  cudaStreamDestroy(s);
  return out;
}

}  // namespace optimate::cuda::bench
