#include "sched/stop_checker.h"

#include <algorithm>

namespace optimate::sched {

bool ends_by_length(const Request& request, int64_t max_model_len) {
  return request.num_output_tokens() >= request.params->max_tokens || request.num_tokens() >= max_model_len;
}

StopDecision check_stop(const Request& request, std::span<const int64_t> eos_token_ids,
                        int64_t max_model_len) {
  const SamplingParams& p = *request.params;
  const int64_t num_output = request.num_output_tokens();
  const int64_t last = request.token_ids.back();
  StopDecision d;
  if (num_output >= p.min_tokens) {
    if (!p.ignore_eos &&
        std::find(eos_token_ids.begin(), eos_token_ids.end(), last) != eos_token_ids.end()) {
      d.reason = FinishReason::kStop;
      return d;
    }
    if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), last) !=
        p.stop_token_ids.end()) {
      d.reason = FinishReason::kStop;
      d.stop_reason = last;
      return d;
    }
  }
  if (ends_by_length(request, max_model_len)) d.reason = FinishReason::kLength;
  return d;
}

}  // namespace optimate::sched
