// Decode-GEMV measurements for cuda_decode_bench: each Llama-3-8B projection at one row for
// every split of k, launched back to back (as in a decode step) with and without
// programmatic dependent launch; and a graph of the whole model's weight streaming (32 layers
// of fused QKV, o, gate/up, down GEMVs plus lm_head, no attention or host work), the part of
// a decode step that the copy bandwidth bounds.
#pragma once

#include <algorithm>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda_bench_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/dummy_fill.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/programmatic_launch.h"
#include "model/model_config.h"

namespace optimate::cuda::bench {

struct Proj {
  const char* name;
  int64_t n, k;
};

inline std::vector<Proj> projections(const ModelConfig& c) {
  const int64_t qkv = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
  return {{"qkv", qkv, c.hidden_size}, {"o", c.hidden_size, c.num_heads * c.head_dim},
          {"gate_up", 2 * c.intermediate_size, c.hidden_size},
          {"down", c.hidden_size, c.intermediate_size}, {"lm_head", c.vocab_size, c.hidden_size}};
}

// Per projection, m = 1: `copies` distinct weight copies (beyond L2) streamed back to back in
// one graph; microseconds per launch and GB/s for each split (0 = the automatic choice).
inline nlohmann::json gemv_split_sweep(const ModelConfig& c) {
  nlohmann::json out = nlohmann::json::array();
  cudaStream_t s;
  OPTIMATE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (const Proj& pr : projections(c)) {
    const int copies = pr.n * pr.k > 100'000'000 ? 4 : 16;
    DeviceBuffer<__nv_bfloat16> w(copies * pr.n * pr.k), x(pr.k);
    DeviceBuffer<float> y(pr.n);
    dummy_fill(w.get(), w.size(), 1, 0, -0.05f, 0.05f);
    dummy_fill(x.get(), x.size(), 1, 1, -1.0f, 1.0f);
    OPTIMATE_CUDA_CHECK(cudaDeviceSynchronize());
    for (bool pdl : {false, true}) {
      set_programmatic_launch(pdl);
      for (int split : {0, 1, 2, 4, 8}) {
        GemvParams p;
        p.m = 1;
        p.n = pr.n;
        p.k = pr.k;
        p.x = x.get();
        p.y = y.get();
        p.epilogue = GemvEpilogue::kStoreF32;
        p.split_k = split;
        cudaGraphExec_t g = capture(s, [&] {
          for (int i = 0; i < copies; ++i) {
            p.w = w.get() + i * pr.n * pr.k;
            gemv(p, s);
          }
        });
        const double us = replay_ms(g, s, 10) * 1e3 / copies;
        cudaGraphExecDestroy(g);
        const double bytes = 2.0 * pr.n * pr.k;
        out.push_back({{"gemm", pr.name}, {"split", split == 0 ? gemv_auto_split(pr.n, pr.k) : split},
                       {"auto", split == 0}, {"programmatic", pdl}, {"us", us},
                       {"gb_per_s", bytes / (us * 1e-6) / 1e9}});
      }
    }
  }
  set_programmatic_launch(true);
  cudaStreamDestroy(s);
  return out;
}

// The model's weight streaming alone: 32 layers x 4 projections + lm_head as m = 1 GEMVs in
// one graph, each layer with its own weights. Returns ms per pass and GB/s, per launch mode.
inline nlohmann::json gemv_model_chain(const ModelConfig& c) {
  const std::vector<Proj> pr = projections(c);
  int64_t per_layer = 0;
  for (int i = 0; i < 4; ++i) per_layer += pr[i].n * pr[i].k;
  const int64_t total = per_layer * c.num_layers + pr[4].n * pr[4].k;
  DeviceBuffer<__nv_bfloat16> w(total), x(c.intermediate_size);
  DeviceBuffer<float> y(c.vocab_size);
  dummy_fill(w.get(), w.size(), 2, 0, -0.05f, 0.05f);
  dummy_fill(x.get(), x.size(), 2, 1, -1.0f, 1.0f);
  OPTIMATE_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t s;
  OPTIMATE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  nlohmann::json out;
  for (bool pdl : {false, true}) {
    set_programmatic_launch(pdl);
    cudaGraphExec_t g = capture(s, [&] {
      const __nv_bfloat16* at = w.get();
      for (int64_t l = 0; l <= c.num_layers; ++l) {
        for (int i = (l == c.num_layers ? 4 : 0); i < (l == c.num_layers ? 5 : 4); ++i) {
          GemvParams p;
          p.m = 1;
          p.n = pr[i].n;
          p.k = pr[i].k;
          p.x = x.get();
          p.w = at;
          p.y = y.get();
          p.epilogue = GemvEpilogue::kStoreF32;
          gemv(p, s);
          at += pr[i].n * pr[i].k;
        }
      }
    });
    const double ms = replay_ms(g, s, 10);
    cudaGraphExecDestroy(g);
    out[pdl ? "programmatic" : "plain"] = {{"ms", ms}, {"weight_bytes", 2.0 * total},
                                           {"gb_per_s", 2.0 * total / (ms * 1e-3) / 1e9}};
  }
  set_programmatic_launch(true);
  cudaStreamDestroy(s);
  return out;
}

}  // namespace optimate::cuda::bench
