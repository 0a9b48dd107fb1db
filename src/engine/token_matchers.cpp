#include "engine/token_matchers.h"

#include <algorithm>

namespace optimate {

TokenMatchers::~TokenMatchers() {
  if (filling_.valid()) filling_.wait();
}

void TokenMatchers::add(const std::string& request_id, int64_t num_seqs, const TokenConstraint& constraint) {
  for (int64_t i = 0; i < num_seqs; ++i) matchers_[{request_id, i}] = constraint.new_matcher();
}

void TokenMatchers::remove(const std::string& request_id) {
  wait();
  auto it = matchers_.lower_bound({request_id, 0});
  while (it != matchers_.end() && it->first.first == request_id) it = matchers_.erase(it);
}

void TokenMatchers::finish(const std::string& request_id, int64_t index) {
  wait();
  matchers_.erase({request_id, index});
}

void TokenMatchers::start_masks(const sched::StepPlan& plan, const sched::Scheduler& scheduler,
                                int64_t vocab_size) {
  wait();
  row_matchers_.clear();
  if (matchers_.empty()) return;
  bool any = false;
  for (const sched::ScheduledSeq& s : plan.seqs) {
    if (!s.want_logits) continue;
    TokenMatcher* m = nullptr;
    if (s.sample.params->constraint)
      if (const sched::Request* r = scheduler.find(s.seq_id)) {
        auto it = matchers_.find({r->request_id, r->seq_index});
        if (it != matchers_.end()) m = it->second.get();
      }
    row_matchers_.push_back(m);
    any |= m != nullptr;
  }
  if (!any) {
    row_matchers_.clear();
    return;
  }
  words_ = token_mask_words(vocab_size);
  masks_.assign(row_matchers_.size() * static_cast<size_t>(words_), 0u);
  filling_ = std::async(std::launch::async, [this] {
    for (size_t k = 0; k < row_matchers_.size(); ++k)
      if (row_matchers_[k])
        row_matchers_[k]->fill_next_token_mask(
            std::span<uint32_t>(masks_.data() + k * static_cast<size_t>(words_), static_cast<size_t>(words_)));
  });
}

void TokenMatchers::wait() {
  if (filling_.valid()) filling_.get();  // rethrows what the helper threw
}

std::span<const uint32_t> TokenMatchers::mask(size_t k) const {
  if (k >= row_matchers_.size() || !row_matchers_[k]) return {};
  return {masks_.data() + k * static_cast<size_t>(words_), static_cast<size_t>(words_)};
}

TokenMatchers::Accepted TokenMatchers::accept(const sched::RequestOutput& out) {
  auto it = matchers_.find({out.request_id, out.index});
  if (it == matchers_.end()) return {Advance::kOk, out.new_token_ids.size()};
  size_t n = 0;
  for (int32_t id : out.new_token_ids) {
    if (it->second->is_terminated()) return {Advance::kTerminated, n};
    if (!it->second->accept_token(id)) return {Advance::kRefused, n};
    ++n;
  }
  return {it->second->is_terminated() ? Advance::kTerminated : Advance::kOk, n};
}

}  // namespace optimate
