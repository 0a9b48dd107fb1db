// What the CUDA decode benchmarks run: the Llama-3-8B shape and a batch of synthetic sequences
// (token ids and block tables) prefilled in steps that fit the token budget.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "runner/model_runner.h"
#include "model/model_config.h"

namespace optimate::cuda::bench {

using Clock = std::chrono::steady_clock;

// Wall seconds since t (host timing of whole steps, graph replays included).
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline ModelConfig llama3_8b(int64_t layers) {
  ModelConfig c;
  c.architecture_name = "LlamaForCausalLM";
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_layers = layers;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 8192;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 500000.0f;
  c.rope_scaling = {RopeScalingType::kLlama3, 8.0f, 1.0f, 4.0f, 8192};
  return c;
}

// Llama-3-70B: 141 GB of bf16 weights, more than one H200 holds.
inline ModelConfig llama3_70b(int64_t layers) {
  ModelConfig c = llama3_8b(layers);
  c.hidden_size = 8192;
  c.intermediate_size = 28672;
  c.num_heads = 64;
  return c;
}

struct Seqs {
  std::vector<std::vector<int32_t>> tokens, tables;
};

// `batch` sequences of prompt_len tokens, each with its own blocks for max_len positions.
inline Seqs make_seqs(int64_t batch, int64_t prompt_len, int64_t max_len, int64_t block_size, int64_t vocab) {
  Seqs s;
  const int64_t blocks = (max_len + block_size - 1) / block_size;
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int32_t> t(prompt_len);
    for (int64_t j = 0; j < prompt_len; ++j) t[j] = int32_t((i * 7919 + j * 104729) % vocab);
    std::vector<int32_t> table(blocks);
    for (int64_t b = 0; b < blocks; ++b) table[b] = int32_t(i * blocks + b);
    s.tokens.push_back(t);
    s.tables.push_back(table);
  }
  return s;
}

// Prefills every sequence, in steps that fit the token budget.
inline void prefill_all(ModelRunner& runner, Seqs& s, int64_t max_tokens) {
  const int64_t batch = s.tokens.size();
  ForwardBatch step;
  int64_t in_step = 0;
  std::vector<float> unused;
  for (int64_t i = 0; i < batch; ++i) {
    if (in_step + int64_t(s.tokens[i].size()) > max_tokens) {
      runner.forward(step, unused);
      step.seqs.clear();
      in_step = 0;
    }
    step.seqs.push_back({s.tokens[i], 0, s.tables[i], i + 1 == batch});
    in_step += s.tokens[i].size();
  }
  runner.forward(step, unused);
}

}  // namespace optimate::cuda::bench
