// Small random-weight Llama configs and the step inputs the CUDA runner tests share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/cuda_model_runner.h"
#include "model/model_config.h"

namespace optimate::cuda::testing {

inline ModelConfig small_config(bool gqa_llama3) {
  ModelConfig c;
  c.architecture_name = "LlamaForCausalLM";
  c.vocab_size = 1000;
  c.num_layers = 2;
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-5f;
  if (gqa_llama3) {
    c.hidden_size = 512;
    c.intermediate_size = 1024;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.rope_theta = 500000.0f;
    c.rope_scaling = {RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 256};
  } else {  // Qwen2-like: q/k/v bias, tied embeddings, head_dim 128
    c.architecture = Architecture::kQwen2;
    c.hidden_size = 256;
    c.intermediate_size = 688;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 128;
    c.rope_theta = 10000.0f;
    c.tie_word_embeddings = true;
    c.attention_bias = true;
  }
  return c;
}

// Llama-3.1's rotary setup (theta 500000, llama3 scaling by 8 from 8192 positions) for a head dim.
inline ModelConfig llama3_rope_config(int64_t head_dim) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_theta = 500000.0f;
  c.rope_scaling.type = RopeScalingType::kLlama3;
  c.rope_scaling.factor = 8.0f;
  c.rope_scaling.low_freq_factor = 1.0f;
  c.rope_scaling.high_freq_factor = 4.0f;
  c.rope_scaling.original_max_position_embeddings = 8192;
  return c;
}

inline CudaRunnerOptions small_options() {
  CudaRunnerOptions o;
  o.max_num_batched_tokens = 512;
  o.max_num_seqs = 16;
  o.max_model_len = 1024;
  o.num_kv_blocks = 200;
  return o;
}

inline std::vector<int32_t> random_tokens(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % vocab);
  return t;
}

// Block ids spread over the pool so paging is exercised.
inline std::vector<int32_t> scattered_table(int64_t num_blocks, int32_t first) {
  std::vector<int32_t> t(num_blocks);
  for (int64_t i = 0; i < num_blocks; ++i) t[i] = int32_t((first + 37 * i) % 200);
  return t;
}

inline std::vector<float> row(const std::vector<float>& all, int64_t r, int64_t vocab) {
  return {all.begin() + r * vocab, all.begin() + (r + 1) * vocab};
}

inline int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace optimate::cuda::testing
