// Token-level stop conditions, checked after every sampled token. Stop strings need decoded
// text, so the engine checks them and ends the sequence through Scheduler::finish_sequence.
#pragma once

#include <cstdint>
#include <span>
#include <variant>

#include "sched/request.h"

namespace optimate::sched {

struct StopDecision {
  FinishReason reason = FinishReason::kNone;
  std::variant<std::monostate, int64_t, std::string> stop_reason;
};

// Checks the last token of `request` (already appended), in vLLM's order: nothing stops before
// min_tokens; then EOS (unless ignore_eos), stop_token_ids, max_tokens, max_model_len.
StopDecision check_stop(const Request& request, std::span<const int64_t> eos_token_ids,
                        int64_t max_model_len);

// The length conditions alone (max_tokens, max_model_len): known before the last token's value.
bool ends_by_length(const Request& request, int64_t max_model_len);

}  // namespace optimate::sched
