// The plain data a step passes between the scheduler, the runner and the sampler.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_copy.h"
#include "kv/kv_format.h"
#include "sampling/sample_row.h"
#include "sched/request.h"

namespace optimate::sched {

// One sequence's work in a step: a prefill chunk or a single decode token.
struct ScheduledSeq {
  SeqId seq_id = 0;
  std::vector<int32_t> token_ids;  // tokens to compute this step
  int64_t start_pos = 0;           // position of token_ids[0]
  std::vector<int32_t> block_ids;  // block table covering [0, start_pos + token_ids.size())
  bool want_logits = false;        // the chunk reaches the sequence's end: sample a token
  sampling::SampleRow sample;      // how to draw that token (set when want_logits)
  // Prompt logprobs: the logits of every token of the chunk are wanted (the runner's
  // all_logits), and row j's logprob of prompt_targets[j], the prompt token at position
  // start_pos + j + 1, is reported. Empty when the chunk covers no such position.
  bool all_logits = false;
  std::vector<int32_t> prompt_targets;
};

struct StepPlan {
  // Blocks the KV policy had requantized in place: the runner rewrites them before the step.
  std::vector<kv::RequantizeOp> requantize;
  // Blocks copied between the device pool and the host tier (swap-out, swap-in, prefix blocks
  // kept in or restored from host memory): the runner applies them after the requantize ops
  // and before the step, in this order (kv/kv_copy.h).
  std::vector<kv::KvCopy> copies;
  std::vector<ScheduledSeq> seqs;
  int64_t num_tokens = 0;
  std::vector<SeqId> preempted;  // sequences preempted this step (KV dropped or swapped out)
  // Set when the batch policy held waiting requests back: when to look again.
  int64_t retry_at_ns = 0;
  int64_t scheduled_ns = 0;  // scheduler clock when schedule() began
  bool empty() const { return seqs.empty(); }
};

struct SampledToken {
  int32_t token_id = 0;
  std::optional<TokenLogprobs> logprobs;  // when the request asked for logprobs
};

// One sampled token per ScheduledSeq with want_logits, in plan order.
struct StepResult {
  std::vector<SampledToken> tokens;
};

}  // namespace optimate::sched
