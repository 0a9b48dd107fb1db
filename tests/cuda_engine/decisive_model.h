// A small Llama whose every greedy prediction is decisive, for engine tests on the CUDA runner
// against the CPU runner (or against itself): embeddings large enough to dominate the residual
// stream, and lm_head row u equal to embedding row sigma(u) for a seeded permutation sigma, so
// the greedy successor of token t is sigma^-1(t) by a wide margin. bf16 rounding, or a KV cache
// quantized to 8 bits, then cannot flip a greedy choice.
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/cuda_weights.h"
#include "core/half.h"
#include "cuda/test_util.h"

namespace optimate::cuda_engine_testing {

inline ModelConfig decisive_config() {
  ModelConfig c;
  c.architecture_name = "LlamaForCausalLM";
  c.vocab_size = 768;
  c.num_layers = 2;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.max_position_embeddings = 1024;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.eos_token_ids = {0};
  return c;
}

inline HostTensor bf16_exact(std::string name, std::vector<int64_t> shape, std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return make_f32_tensor(std::move(name), std::move(shape), std::move(v));
}

// Dummy layers, decisive embedding and lm_head (see the file comment).
inline LoadedModel decisive_model() {
  const ModelConfig c = decisive_config();
  LoadedModel m = cuda::make_dummy_model(c, 2024);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> emb(static_cast<size_t>(c.vocab_size * c.hidden_size));
  for (float& x : emb) x = normal(rng);
  std::vector<int64_t> sigma(static_cast<size_t>(c.vocab_size));
  std::iota(sigma.begin(), sigma.end(), 0);
  std::shuffle(sigma.begin(), sigma.end(), rng);
  std::vector<float> head(emb.size());
  for (int64_t u = 0; u < c.vocab_size; ++u)
    std::copy_n(emb.begin() + sigma[u] * c.hidden_size, c.hidden_size, head.begin() + u * c.hidden_size);
  for (float& x : head) x *= 0.1f;
  m.weights.tok_embeddings = bf16_exact("tok_embeddings", {c.vocab_size, c.hidden_size}, emb);
  m.weights.lm_head = bf16_exact("lm_head", {c.vocab_size, c.hidden_size}, head);
  return m;
}

}  // namespace optimate::cuda_engine_testing
