// What the CUDA engine tests share: the runner and engine sizes they run the decisive model
// with (48 sequences a step, 256 tokens, a 1024-token context, half the GPU), and the 40
// requests of 3..600 prompt tokens they run at once.
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_model_runner.h"
#include "engine/engine.h"

namespace optimate::cuda_engine_testing {

inline cuda::CudaRunnerOptions small_runner_options(int64_t num_kv_blocks) {
  cuda::CudaRunnerOptions o;
  o.max_num_seqs = 48;
  o.max_num_batched_tokens = 256;
  o.max_model_len = 1024;
  o.num_kv_blocks = num_kv_blocks;
  o.gpu_memory_utilization = 0.5;
  return o;
}

inline EngineConfig small_engine_config(int64_t num_kv_blocks, int64_t block_size) {
  EngineConfig e;
  e.max_num_seqs = 48;
  e.max_num_batched_tokens = 256;  // long prompts prefill in chunks beside running decodes
  e.max_model_len = 1024;
  e.block_size = block_size;
  e.num_kv_blocks = num_kv_blocks;
  return e;
}

using Tokens = std::map<std::string, std::vector<int32_t>>;

// 40 requests at once, prompts of 3..600 tokens of the decisive model's vocabulary;
// `temperature` 0 is greedy, else seeded (top_p 0.95).
inline Tokens run_forty_requests(Engine& engine, float temperature) {
  std::mt19937 rng(99);
  for (int i = 0; i < 40; ++i) {
    std::vector<int32_t> prompt(3 + (i * 37) % 600);
    for (auto& t : prompt) t = 1 + static_cast<int32_t>(rng() % 767);
    SamplingParams p;
    p.max_tokens = 20 + i % 7;
    p.ignore_eos = true;
    p.temperature = temperature;
    p.top_p = 0.95f;
    p.seed = 1000 + i;
    engine.add_request("r" + std::to_string(i), prompt, p);
  }
  Tokens out;
  while (engine.has_unfinished())
    for (const RequestOutput& o : engine.step())
      out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
  return out;
}

}  // namespace optimate::cuda_engine_testing
