// Building engines over the fake model and running requests to completion.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/fake_model.h"

namespace optimate::testing {

struct FakeEngineOptions {
  int64_t num_blocks = 256;
  int64_t block_size = 4;
  int64_t max_num_seqs = 32;
  int64_t max_num_batched_tokens = 64;
  int64_t max_model_len = 256;
  bool prefix_caching = true;
  PriorityOrder priority_order = PriorityOrder::kHigherFirst;
  std::vector<OptimizerSpec> optimizers;
  // The host tier, in blocks: swap space and host prefix cache (0: none), and what a preempted
  // request does.
  int64_t host_swap_blocks = 0;
  int64_t host_prefix_blocks = 0;
  std::string preemption_mode = "auto";
};

// The settings of a fake engine (its host tier in whole blocks of the fake model).
inline EngineConfig fake_engine_config(const FakeEngineOptions& o = {}) {
  EngineConfig c;
  c.max_num_seqs = o.max_num_seqs;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.max_model_len = o.max_model_len;
  c.block_size = o.block_size;
  c.enable_prefix_caching = o.prefix_caching;
  c.priority_order = o.priority_order;
  c.optimizers = o.optimizers;
  // A fake block is 1 layer's K and V of one bf16 value a token; half a block more keeps the
  // GiB figure from rounding down to a block less.
  const double block_gib = static_cast<double>(2 * 2 * o.block_size) / 1073741824.0;
  c.swap_space = o.host_swap_blocks > 0 ? (static_cast<double>(o.host_swap_blocks) + 0.5) * block_gib : 0.0;
  c.host_prefix_cache_space = o.host_prefix_blocks > 0 ? (static_cast<double>(o.host_prefix_blocks) + 0.5) * block_gib : 0.0;
  c.preemption_mode = parse_choice<PreemptionMode>(o.preemption_mode, "preemption_mode");
  return c;
}

inline Engine make_fake_engine(const FakeEngineOptions& o = {},
                               std::shared_ptr<const Clock> clock = std::make_shared<FakeClock>()) {
  const EngineConfig c = fake_engine_config(o);
  EngineParts parts;
  parts.runner = std::make_unique<FakeModelRunner>(o.num_blocks, o.block_size, 4096,
                                                   kv::HostTierSlots{o.host_swap_blocks, o.host_prefix_blocks});
  parts.codec = std::make_shared<FakeCodec>();
  parts.clock = std::move(clock);
  return Engine(c, std::move(parts));
}

struct SeqResult {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason reason = FinishReason::kNone;
  int64_t num_finished = 0;  // must end up 1
  sched::Usage usage;
};
using Results = std::map<std::pair<std::string, int64_t>, SeqResult>;

// Greedy decoding of max_tokens tokens (n sequences), the end-of-sequence token ignored.
inline SamplingParams greedy(int64_t max_tokens, int64_t n = 1) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.n = n;
  return p;
}

inline void collect(const std::vector<RequestOutput>& outs, Results& results) {
  for (const auto& o : outs) {
    SeqResult& r = results[{o.request_id, o.index}];
    r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    r.text += o.text;
    if (o.finished) {
      r.reason = o.finish_reason;
      ++r.num_finished;
      r.usage = o.usage;
    }
  }
}

// Each sequence's tokens, for comparing two runs of the same requests.
inline std::map<std::pair<std::string, int64_t>, std::vector<int32_t>> tokens_of(const Results& results) {
  std::map<std::pair<std::string, int64_t>, std::vector<int32_t>> out;
  for (const auto& [key, r] : results) out[key] = r.tokens;
  return out;
}

// What a device sampler draws for each row: the CPU sampler over the rows' logits (the rule
// every device sampler follows), `vocab` floats per row.
inline std::vector<int32_t> draw_on_host(sampling::Sampler& sampler, std::span<const float> logits,
                                         std::span<const SampleSpec> rows, int64_t vocab) {
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < rows.size(); ++i) {
    sampling::SampleInput in;
    in.logits = logits.subspan(i * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
    in.params = rows[i].params;
    in.seed = rows[i].seed;
    in.output_index = rows[i].output_index;
    tokens.push_back(sampler.sample(in).token_id);
  }
  return tokens;
}

inline Results run_to_completion(Engine& engine, int64_t max_steps = 1000000) {
  Results results;
  for (int64_t i = 0; i < max_steps && engine.has_unfinished(); ++i) collect(engine.step(), results);
  return results;
}

}  // namespace optimate::testing
