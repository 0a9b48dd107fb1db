#include "engine/prompt_logprobs_collector.h"

namespace optimate {

void PromptLogprobsCollector::add(const std::string& request_id, int64_t num_seqs) {
  Pending& p = requests_[request_id];
  p.given.assign(static_cast<size_t>(num_seqs), false);
  p.num_left = num_seqs;
}

void PromptLogprobsCollector::remove(const std::string& request_id) { requests_.erase(request_id); }

void PromptLogprobsCollector::collect(const std::string& request_id, int64_t first_pos,
                                      std::span<const sampling::PositionLogprobs> entries) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  std::vector<sched::TokenLogprobs>& held = it->second.entries;
  for (size_t j = 0; j < entries.size(); ++j) {
    if (first_pos + static_cast<int64_t>(j) != static_cast<int64_t>(held.size()) + 1) continue;
    const sampling::PositionLogprobs& e = entries[j];
    sched::TokenLogprobs lp;
    lp.sampled = {e.token.token_id, e.token.logprob, e.rank};
    for (size_t t = 0; t < e.top.size(); ++t)
      lp.top.push_back({e.top[t].token_id, e.top[t].logprob, static_cast<int64_t>(t) + 1});
    held.push_back(std::move(lp));
  }
}

void PromptLogprobsCollector::attach(sched::RequestOutput& out) {
  auto it = requests_.find(out.request_id);
  if (it == requests_.end()) return;
  Pending& p = it->second;
  if (out.index < 0 || out.index >= static_cast<int64_t>(p.given.size()) || p.given[out.index]) return;
  p.given[out.index] = true;
  if (--p.num_left == 0) {
    out.prompt_logprobs = std::move(p.entries);
    requests_.erase(it);
  } else {
    out.prompt_logprobs = p.entries;
  }
}

}  // namespace optimate
