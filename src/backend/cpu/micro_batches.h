// A forward batch cut into parts of at most a given number of tokens, run one after the other:
// the CPU runner's scratch then scales with the part, not with the engine's step (llama.cpp
// computes in micro-batches of 512 tokens the same way). A sequence's slice may be cut anywhere;
// a later part's attention reads the K/V an earlier part wrote, so the logits are those of the
// whole batch.
#pragma once

#include <cstdint>
#include <vector>

#include "runner/model_runner.h"

namespace optimate::cpu {

// Tokens the CPU runner runs at once by default (CpuRunnerOptions::max_step_tokens).
inline constexpr int64_t kCpuMicroBatchTokens = 512;

// The batch's slices in order, cut so that no part holds more than max_tokens (>= 1) tokens.
// A cut slice keeps its block table; its pieces start where the previous one ended, only its
// last piece asks for the slice's logits (every piece, for all_logits), so the parts' logit rows
// in order are the batch's.
std::vector<ForwardBatch> split_batch(const ForwardBatch& batch, int64_t max_tokens);

}  // namespace optimate::cpu
