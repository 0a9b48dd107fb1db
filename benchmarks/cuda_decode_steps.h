// Greedy decode steps of a batch of synthetic sequences on the CUDA runner, one at a time or
// overlapped as the engine runs them, and the output tokens per second they give: what the
// decode benchmarks (cuda_decode_bench, cuda_moe_bench) time.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_model_runner.h"
#include "core/sampling_params.h"
#include "cuda_decode_workload.h"

namespace optimate::cuda::bench {

// `n` greedy decode steps of the whole batch, each token fed back.
inline void decode_steps(CudaModelRunner& runner, Seqs& s, int64_t n) {
  const int64_t batch = s.tokens.size();
  std::vector<int32_t> out;
  std::vector<std::vector<int32_t>> one(batch);
  for (int64_t k = 0; k < n; ++k) {
    ForwardBatch d;
    for (int64_t i = 0; i < batch; ++i) {
      one[i] = {s.tokens[i].back()};
      d.seqs.push_back({one[i], int64_t(s.tokens[i].size()) - 1, s.tables[i], true});
    }
    runner.forward_greedy(d, out);
    for (int64_t i = 0; i < batch; ++i) s.tokens[i].push_back(out[i]);
  }
}

// The same steps overlapped, as the engine runs them with async_scheduling: step k + 1 is
// launched with its tokens fed back from step k on the device before the host collects step k.
inline void decode_steps_overlapped(CudaModelRunner& runner, Seqs& s, int64_t n) {
  const int64_t batch = s.tokens.size();
  static const SamplingParams greedy_params = [] {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }();
  const std::vector<SampleSpec> specs(batch, SampleSpec{&greedy_params, 0, 0});
  std::vector<int32_t> out;
  std::vector<std::vector<int32_t>> one(batch);
  const int64_t first_pos = int64_t(s.tokens[0].size()) - 1;  // every sequence has the same length
  for (int64_t k = 0; k <= n; ++k) {
    if (k < n) {
      ForwardBatch d;
      for (int64_t i = 0; i < batch; ++i) {
        one[i] = {k == 0 ? s.tokens[i].back() : token_from_last_launch(i)};
        d.seqs.push_back({one[i], first_pos + k, s.tables[i], true});
      }
      runner.launch_sample(d, specs);
    }
    if (k == 0) continue;
    runner.collect_sample(out);
    for (int64_t i = 0; i < batch; ++i) s.tokens[i].push_back(out[i]);
  }
}

// Prefills every sequence, then times `steps` greedy decode steps of the whole batch (one at a
// time, or overlapped). Returns output tokens per second.
inline double decode_throughput(CudaModelRunner& runner, Seqs& s, int64_t steps, int64_t max_tokens,
                         bool overlapped = false) {
  prefill_all(runner, s, max_tokens);
  // The last prompt token's KV is rewritten by the first decode step, which feeds it again.
  decode_steps(runner, s, 3);  // capture and warm up
  const auto t0 = Clock::now();
  if (overlapped) decode_steps_overlapped(runner, s, steps);
  else decode_steps(runner, s, steps);
  return s.tokens.size() * steps / seconds_since(t0);
}

}  // namespace optimate::cuda::bench
