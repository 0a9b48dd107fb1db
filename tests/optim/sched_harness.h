// Driving the scheduler directly with a fake clock: requests arrive at set times, every step
// that runs takes a fixed time, and each sampled token is 7 (never EOS) unless a test sets its
// own token source, so what a test sees is purely the scheduling: who was admitted, preempted
// or held back, and when.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "optim/registry.h"
#include "sched/scheduler.h"

namespace optimate::testing {

inline optim::PolicySet build_optimizers(const std::vector<OptimizerSpec>& specs) {
  return optim::OptimizerRegistry::with_builtin().build_all(specs);
}

inline std::shared_ptr<const SamplingParams> tokens(int64_t max_tokens) {
  auto p = std::make_shared<SamplingParams>();
  p->max_tokens = max_tokens;
  p->ignore_eos = true;
  return p;
}

// What happened to each request id, in clock time.
struct Timeline {
  std::map<std::string, int64_t> arrival_ns;
  std::map<std::string, int64_t> first_scheduled_ns;  // start of the first step it ran in
  std::map<std::string, int64_t> first_token_ns;      // end of the step that produced it
  std::map<std::string, int64_t> finished_ns;
  std::vector<int64_t> batch_sizes;                   // sequences per step that ran
  int64_t num_preempted = 0;
};

// The token a step samples for one row of its plan.
using TokenSource = std::function<int32_t(const sched::ScheduledSeq&)>;

// 100 + the row's output index: a sequence's k-th generated token is always 100 + k, so a
// sequence that lost its KV and resumed shows whether it continued exactly where it stopped.
inline int32_t counting_token(const sched::ScheduledSeq& s) {
  return 100 + static_cast<int32_t>(s.sample.output_index);
}

// Four-token blocks, EOS id 0, the prefix cache on: the small scale of the scheduler tests.
inline sched::SchedulerConfig small_config(int64_t max_num_seqs, int64_t max_num_batched_tokens,
                                           int64_t num_kv_blocks, int64_t max_model_len) {
  sched::SchedulerConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_num_batched_tokens;
  c.max_model_len = max_model_len;
  c.block_size = 4;
  c.num_kv_blocks = num_kv_blocks;
  c.eos_token_ids = {0};
  return c;
}

// What counting_token makes a sequence generate in `count` tokens: 100, 101, ...
inline std::vector<int32_t> counted(int64_t count) {
  std::vector<int32_t> out;
  for (int64_t k = 0; k < count; ++k) out.push_back(100 + static_cast<int32_t>(k));
  return out;
}

// `count` consecutive token ids from `first`: prompts that share no prefix unless a test
// makes them.
inline std::vector<int32_t> token_range(int32_t first, int64_t count) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(first + static_cast<int32_t>(i));
  return out;
}

class SchedHarness {
 public:
  SchedHarness(sched::SchedulerConfig config, optim::PolicySet policies, int64_t step_ns)
      : scheduler_(std::move(config), std::move(policies), clock_), step_ns_(step_ns) {}

  FakeClock& clock() { return clock_; }
  sched::Scheduler& scheduler() { return scheduler_; }
  Timeline& timeline() { return timeline_; }
  void set_token_source(TokenSource source) { token_source_ = std::move(source); }
  // The last step()'s plan as describe() put it, taken before its finished sequences left.
  const std::string& described() const { return described_; }

  // Arrives now, or at `arrival_ns` when given (the time a front end stamped on it).
  void add(const std::string& id, int64_t prompt_len, int64_t max_tokens, int64_t priority,
           std::optional<int64_t> arrival_ns = std::nullopt) {
    // A token of its own per request: no prefix-cache sharing between them.
    const int32_t token = 2 + static_cast<int32_t>(next_seq_ % 1000);
    add_request(id, std::vector<int32_t>(static_cast<size_t>(prompt_len), token),
                tokens(max_tokens), priority, arrival_ns);
  }

  // A request with its own prompt and parameters (params->n sequences).
  void add_request(const std::string& id, std::vector<int32_t> prompt,
                   std::shared_ptr<const SamplingParams> params, int64_t priority = 0,
                   std::optional<int64_t> arrival_ns = std::nullopt, uint64_t seed = 0) {
    RequestMetadata meta;
    meta.priority = EnginePriority{priority};
    meta.arrival_ns = arrival_ns;
    const int64_t n = params->n;
    scheduler_.add_request(id, std::move(prompt), std::move(params), meta, seed);
    timeline_.arrival_ns[id] = arrival_ns.value_or(clock_.now_ns());
    seq_of_[id] = next_seq_;  // the scheduler numbers sequences 0, 1, ... in arrival order
    next_seq_ += n;
  }

  // One schedule(); when it runs something the clock advances by the step time. Returns the
  // plan (its retry_at_ns tells when a held queue is worth another look).
  sched::StepPlan step() {
    const int64_t start = clock_.now_ns();
    sched::StepPlan plan = scheduler_.schedule();
    timeline_.num_preempted += static_cast<int64_t>(plan.preempted.size());
    described_ = describe(plan);
    if (plan.empty()) return plan;
    for (const auto& s : plan.seqs) {
      const std::string& id = scheduler_.find(s.seq_id)->request_id;
      timeline_.first_scheduled_ns.emplace(id, start);
    }
    timeline_.batch_sizes.push_back(static_cast<int64_t>(plan.seqs.size()));
    clock_.advance_ns(step_ns_);
    sched::StepResult result;
    for (const auto& s : plan.seqs)
      if (s.want_logits) result.tokens.push_back({token_source_(s), std::nullopt});
    for (const auto& out : scheduler_.update(plan, result)) {
      auto& stream = streamed_[{out.request_id, out.index}];
      stream.insert(stream.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      if (out.finished) finished_[{out.request_id, out.index}] = out;
      if (!out.new_token_ids.empty()) timeline_.first_token_ns.emplace(out.request_id, clock_.now_ns());
      if (out.finished) timeline_.finished_ns[out.request_id] = clock_.now_ns();
    }
    return plan;
  }

  // Steps until every request finished; returns how many steps that took (at most max_steps).
  int64_t run_to_end(int64_t max_steps = 1000) {
    int64_t steps = 0;
    while (scheduler_.has_unfinished() && steps < max_steps) {
      step();
      ++steps;
    }
    EXPECT_FALSE(scheduler_.has_unfinished()) << "still unfinished after " << max_steps << " steps";
    return steps;
  }

  // The tokens sample `index` of request `id` reported so far, and its last output once it
  // finished (nullptr before).
  std::vector<int32_t> streamed(const std::string& id, int64_t index = 0) const {
    auto it = streamed_.find({id, index});
    return it == streamed_.end() ? std::vector<int32_t>{} : it->second;
  }
  const sched::RequestOutput* finished(const std::string& id, int64_t index = 0) const {
    auto it = finished_.find({id, index});
    return it == finished_.end() ? nullptr : &it->second;
  }

  bool running(const std::string& id) const { return is_status(id, sched::RequestStatus::kRunning); }
  bool waiting(const std::string& id) const { return is_status(id, sched::RequestStatus::kWaiting); }
  // Sequence `index` of request `id`; null once it finished.
  const sched::Request* request(const std::string& id, int64_t index = 0) const {
    auto it = seq_of_.find(id);
    return it == seq_of_.end() ? nullptr : scheduler_.find(it->second + index);
  }
  int64_t free_blocks() const { return scheduler_.kv().pool().num_free_blocks(); }

  // A plan as one line: "id:start+count" per row, "*" where it samples, then "!id" per
  // preempted sequence, then "out:N" and "in:N" for blocks copied to and from the host tier;
  // the samples of an n > 1 request are "id.0", "id.1", ...
  std::string describe(const sched::StepPlan& plan) const {
    std::string out;
    auto name = [&](sched::SeqId seq) {
      const sched::Request* r = scheduler_.find(seq);
      if (!r) return std::string("?");
      return r->params->n > 1 ? r->request_id + "." + std::to_string(r->seq_index) : r->request_id;
    };
    for (const auto& s : plan.seqs) {
      if (!out.empty()) out += ' ';
      out += name(s.seq_id) + ":" + std::to_string(s.start_pos) + "+" +
             std::to_string(s.token_ids.size()) + (s.want_logits ? "*" : "");
    }
    for (sched::SeqId seq : plan.preempted) out += (out.empty() ? "!" : " !") + name(seq);
    const auto to_host = std::count_if(plan.copies.begin(), plan.copies.end(),
                                       [](const kv::KvCopy& c) { return c.direction == kv::CopyDirection::kToHost; });
    const auto to_device = static_cast<int64_t>(plan.copies.size()) - to_host;
    if (to_host > 0) out += (out.empty() ? "out:" : " out:") + std::to_string(to_host);
    if (to_device > 0) out += (out.empty() ? "in:" : " in:") + std::to_string(to_device);
    return out;
  }

 private:
  bool is_status(const std::string& id, sched::RequestStatus status) const {
    const sched::Request* r = request(id);
    return r && r->status == status;
  }

  FakeClock clock_;
  sched::Scheduler scheduler_;
  int64_t step_ns_;
  TokenSource token_source_ = [](const sched::ScheduledSeq&) { return 7; };
  std::map<std::pair<std::string, int64_t>, std::vector<int32_t>> streamed_;
  std::map<std::pair<std::string, int64_t>, sched::RequestOutput> finished_;
  std::string described_;
  Timeline timeline_;
  std::map<std::string, int64_t> seq_of_;
  int64_t next_seq_ = 0;
};

// One expected step: its plan as SchedHarness::describe writes it, and the free KV blocks
// after it.
struct ExpectedStep {
  const char* plan;
  int64_t free_blocks;
};

// Runs one step per entry, numbering them from `first_step` in failure messages.
inline void expect_steps(SchedHarness& h, std::span<const ExpectedStep> steps,
                         int64_t first_step = 1) {
  for (size_t i = 0; i < steps.size(); ++i) {
    h.step();
    SCOPED_TRACE("step " + std::to_string(first_step + static_cast<int64_t>(i)));
    EXPECT_EQ(h.described(), steps[i].plan);
    EXPECT_EQ(h.free_blocks(), steps[i].free_blocks);
  }
}

inline double counter(const optim::Policy& policy, const std::string& name) {
  for (const auto& c : policy.counters())
    if (c.name == name) return c.value;
  ADD_FAILURE() << policy.name() << " has no counter " << name;
  return -1;
}

}  // namespace optimate::testing
