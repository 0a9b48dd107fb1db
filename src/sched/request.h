// A sequence the scheduler tracks: the request's prompt plus the tokens generated so far, how
// many of them have KV in the cache, and its place in the queues. A request with n > 1 is n
// of these (one per sample) sharing the request id.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/priority_order.h"
#include "core/request_metadata.h"
#include "core/sampling_params.h"
#include "sched/request_output.h"

namespace optimate::sched {

using SeqId = int64_t;

// A generated token whose value the device has not reported yet: the scheduler plans the next
// step while this one runs (Scheduler::advance), and Scheduler::resolve writes the token over
// it. A step that carries one takes the token from the device (ModelRunner::launch_sample).
inline constexpr int32_t kPendingToken = std::numeric_limits<int32_t>::min();

enum class RequestStatus { kWaiting, kRunning, kFinished };

struct Request {
  SeqId seq_id = 0;
  std::string request_id;
  int64_t seq_index = 0;  // which of the request's n samples
  std::shared_ptr<const SamplingParams> params;
  RequestMetadata metadata;  // as the front end sent it
  int64_t arrival_ns = 0;    // metadata.arrival_ns, or when the scheduler took the request
  uint64_t seed = 0;      // sampling seed of this sequence (request seed + index)

  std::vector<int32_t> token_ids;  // prompt, then generated tokens (the last may be kPendingToken)
  int64_t num_prompt_tokens = 0;
  int64_t num_computed_tokens = 0; // positions whose KV is in the cache
  int64_t num_cached_tokens = 0;   // prompt tokens served by the prefix cache at first admission
  int64_t num_preemptions = 0;
  int64_t last_admitted_ns = -1;   // when it last entered the running set (-1: never)
  int64_t first_admitted_ns = -1;  // when it first entered the running set (-1: never)
  // Since its last preemption, until it has computed as many tokens again (-1: not preempted).
  int64_t preempted_ns = -1;
  int64_t resume_at_tokens = 0;
  RequestStatus status = RequestStatus::kWaiting;
  // For n > 1: the sibling whose prompt KV this sequence shares instead of recomputing it.
  std::optional<SeqId> fork_parent;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  // The last token is kPendingToken: its step is in flight (Scheduler::advance).
  bool token_pending() const { return !token_ids.empty() && token_ids.back() == kPendingToken; }
};

}  // namespace optimate::sched
