// The grammar matchers of the requests that asked for one (structured outputs, tool calls):
// one per sequence, advanced past every token the sequence draws. A step's masks are filled on
// a helper thread while the runner computes the step (start_masks before the forward pass,
// wait after it), since a mask depends only on the tokens drawn before the step.
#pragma once

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/token_constraint.h"
#include "sched/scheduler.h"

namespace optimate {

class TokenMatchers {
 public:
  TokenMatchers() = default;
  TokenMatchers(TokenMatchers&&) = default;
  TokenMatchers& operator=(TokenMatchers&&) = default;
  ~TokenMatchers();

  // One matcher per sequence 0 .. num_seqs - 1 of the request.
  void add(const std::string& request_id, int64_t num_seqs, const TokenConstraint& constraint);
  void remove(const std::string& request_id);
  bool empty() const { return matchers_.empty(); }

  // Starts filling the mask of every sampled row of `plan` whose sequence has a matcher (on a
  // helper thread); wait() before reading masks or calling accept.
  void start_masks(const sched::StepPlan& plan, const sched::Scheduler& scheduler, int64_t vocab_size);
  void wait();
  // The mask of the plan's k-th sampled row; empty when its sequence has no matcher.
  std::span<const uint32_t> mask(size_t k) const;

  enum class Advance { kOk, kTerminated, kRefused };
  struct Accepted {
    Advance advance = Advance::kOk;
    size_t num_tokens = 0;  // of the output's new tokens, those the grammar took
  };
  // Advances the output's sequence past its new tokens: kTerminated once the grammar has
  // ended, kRefused when it does not allow a token (the matcher stays before it).
  Accepted accept(const sched::RequestOutput& out);
  void finish(const std::string& request_id, int64_t index);

 private:
  using Key = std::pair<std::string, int64_t>;
  std::map<Key, std::unique_ptr<TokenMatcher>> matchers_;
  std::vector<TokenMatcher*> row_matchers_;  // per sampled row of the current step, or null
  std::vector<uint32_t> masks_;              // (rows, words)
  int64_t words_ = 0;
  std::future<void> filling_;
};

}  // namespace optimate
