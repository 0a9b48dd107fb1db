// Gathers a request's prompt logprobs over its prefill chunks (the scheduler asks every
// chunk's logits for them) and hands a copy to the first output of each of its sequences.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "sampling/prompt_logprobs.h"
#include "sched/request_output.h"

namespace optimate {

class PromptLogprobsCollector {
 public:
  void add(const std::string& request_id, int64_t num_seqs);
  void remove(const std::string& request_id);

  // Entries for the prompt tokens at positions first_pos, first_pos + 1, ... (first_pos >= 1);
  // positions already held (a chunk computed again after a preemption) are skipped.
  void collect(const std::string& request_id, int64_t first_pos,
               std::span<const sampling::PositionLogprobs> entries);
  // On a sequence's first output, copies the request's prompt logprobs into it.
  void attach(sched::RequestOutput& out);

 private:
  struct Pending {
    std::vector<sched::TokenLogprobs> entries;  // positions 1, 2, ...
    std::vector<bool> given;                    // per sequence
    int64_t num_left = 0;
  };
  std::map<std::string, Pending> requests_;
};

}  // namespace optimate
