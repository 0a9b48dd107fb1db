// Priority under sustained overload: arrivals above capacity for many times every aging and
// max-wait setting. What a user must see: the more important classes keep waits bounded by the
// service time of one request however long the overload lasts, the least important class
// keeps being served (nothing starves forever), and within a class arrival order holds.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "optim/sched_harness.h"

namespace optimate::testing {
namespace {

constexpr int64_t kStepNs = 100'000'000;   // 100 ms per step
constexpr int64_t kSlots = 4;
constexpr int64_t kOutputTokens = 4;       // each request holds a slot for 4 steps
constexpr int64_t kServiceNs = kOutputTokens * kStepNs;

sched::SchedulerConfig config() {
  sched::SchedulerConfig c;
  c.max_num_seqs = kSlots;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 64;
  c.block_size = 4;
  c.num_kv_blocks = 4096;
  c.eos_token_ids = {0};
  return c;
}

struct ClassWaits {
  std::vector<int64_t> waits_ns;       // admitted requests: first scheduled - arrival
  int64_t num_arrived = 0;
  int64_t num_unadmitted_first_half = 0;  // arrived in the first half, never admitted
};

struct Overload {
  std::map<int64_t, ClassWaits> by_priority;  // engine priority -> waits
  int64_t num_steps = 0;
};

// `arrivals(step)` names the priorities arriving at the start of each 100 ms step.
Overload run(optim::PolicySet policies, int64_t duration_ns,
             const std::function<std::vector<int64_t>(int64_t)>& arrivals) {
  SchedHarness h(config(), std::move(policies), kStepNs);
  std::map<std::string, int64_t> priority_of;
  int64_t next_id = 0;
  int64_t step = 0;
  while (h.clock().now_ns() < duration_ns) {
    for (int64_t p : arrivals(step)) {
      const std::string id = "r" + std::to_string(next_id++);
      h.add(id, 8, kOutputTokens, p);
      priority_of[id] = p;
    }
    const auto plan = h.step();
    if (plan.empty()) h.clock().advance_ns(kStepNs);
    ++step;
  }
  Overload out;
  out.num_steps = step;
  const Timeline& t = h.timeline();
  for (const auto& [id, p] : priority_of) {
    ClassWaits& c = out.by_priority[p];
    ++c.num_arrived;
    auto it = t.first_scheduled_ns.find(id);
    if (it != t.first_scheduled_ns.end()) c.waits_ns.push_back(it->second - t.arrival_ns.at(id));
    else if (t.arrival_ns.at(id) < duration_ns / 2) ++c.num_unadmitted_first_half;
  }
  return out;
}

int64_t percentile(std::vector<int64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

OptimizerSpec priority(OptionMap options = {}) { return {"priority", std::move(options)}; }

// Capacity is 4 slots / 400 ms = 10 requests/s. Each step one low request arrives (10/s) and a
// high one every third step (3.3/s): 1.33x capacity for 150 s, five times the default 30 s
// max_wait_ms and thirty times the default 5 s aging_ms.
std::vector<int64_t> two_classes(int64_t step) {
  std::vector<int64_t> p = {0};
  if (step % 3 == 0) p.push_back(1);
  return p;
}

TEST(PriorityOverload, TwoLevelsWithDefaultsKeepTheHighClassAhead) {
  constexpr int64_t kDuration = 150'000'000'000;
  const Overload fcfs = run({}, kDuration, two_classes);
  const Overload prio = run(build_optimizers({priority({{"levels", int64_t{2}}})}), kDuration, two_classes);

  const ClassWaits& high = prio.by_priority.at(1);
  const ClassWaits& low = prio.by_priority.at(0);
  ASSERT_EQ(static_cast<int64_t>(high.waits_ns.size()), high.num_arrived);
  // Every high request waits at most for one slot to free: one request's service time.
  EXPECT_LE(percentile(high.waits_ns, 1.0), kServiceNs);
  // FCFS lets the backlog (growing 3.3 requests/s) delay everyone alike.
  const int64_t fcfs_high_p99 = percentile(fcfs.by_priority.at(1).waits_ns, 0.99);
  EXPECT_GT(fcfs_high_p99, 20 * kServiceNs);
  EXPECT_LE(percentile(high.waits_ns, 0.99), fcfs_high_p99 / 20);
  // The low class is still served, in arrival order: nothing from the first half is left.
  EXPECT_EQ(low.num_unadmitted_first_half, 0);
  // And the engine serves as many requests as under FCFS.
  const size_t served = high.waits_ns.size() + low.waits_ns.size();
  const size_t served_fcfs = fcfs.by_priority.at(1).waits_ns.size() + fcfs.by_priority.at(0).waits_ns.size();
  EXPECT_GE(served, served_fcfs * 97 / 100);
}

TEST(PriorityOverload, FourLevelsKeepTheirOrderAndBoundedWaits) {
  // Critical, high and medium arrive at 1.67/s each (half the capacity together); low at
  // 10/s. 60 s with max_wait_ms 2 s and aging_ms 500 ms: thirty times both.
  const auto arrivals = [](int64_t step) {
    std::vector<int64_t> p = {0};
    if (step % 6 == 0) p.push_back(3);
    if (step % 6 == 2) p.push_back(2);
    if (step % 6 == 4) p.push_back(1);
    return p;
  };
  const Overload o = run(build_optimizers({priority({{"max_wait_ms", 2000.0}, {"aging_ms", 500.0}})}),
                         60'000'000'000, arrivals);
  for (int64_t p : {1, 2, 3}) {
    const ClassWaits& c = o.by_priority.at(p);
    ASSERT_EQ(static_cast<int64_t>(c.waits_ns.size()), c.num_arrived) << "priority " << p;
    // Past their deadline the low requests may take up to overdue_share (10%) of admissions
    // ahead of these, so a request can wait for two slots instead of one.
    EXPECT_LE(percentile(c.waits_ns, 1.0), 2 * kServiceNs) << "priority " << p;
  }
  EXPECT_EQ(o.by_priority.at(0).num_unadmitted_first_half, 0);
}

TEST(PriorityOverload, OverdueRequestsTakeAtMostTheirShareOfAdmissions) {
  // The high class alone is above capacity (13.3/s against 10/s): without the deadline the
  // low class would never run. With it, the overdue low requests take their share and no
  // more, and every low request from the first half is served.
  const auto arrivals = [](int64_t step) {
    std::vector<int64_t> p = {1};
    if (step % 3 == 0) p.push_back(1);
    if (step % 2 == 0) p.push_back(0);
    return p;
  };
  const optim::PolicySet policies =
      build_optimizers({priority({{"levels", int64_t{2}}, {"max_wait_ms", 2000.0}})});
  SchedHarness h(config(), policies, kStepNs);
  int64_t next = 0;
  std::vector<std::string> lows;
  for (int64_t step = 0; h.clock().now_ns() < 60'000'000'000; ++step) {
    for (int64_t p : arrivals(step)) {
      const std::string id = (p == 0 ? "low" : "high") + std::to_string(next++);
      h.add(id, 8, kOutputTokens, p);
      if (p == 0) lows.push_back(id);
    }
    h.step();
  }
  const optim::Policy& policy = *h.scheduler().policies().queue;
  const double admissions = counter(policy, "admissions");
  const double overdue = counter(policy, "overdue_admissions");
  EXPECT_GT(overdue, 0);
  EXPECT_LE(overdue, 0.1 * admissions + 1);
  // Lows arrive at 5/s and get 1/s: the backlog grows, but the oldest keep being served.
  const Timeline& t = h.timeline();
  EXPECT_EQ(t.first_scheduled_ns.count(lows.front()), 1u);
  EXPECT_GT(std::count_if(lows.begin(), lows.end(),
                          [&](const std::string& id) { return t.first_scheduled_ns.count(id) != 0; }),
            40);
}

TEST(PriorityOverload, APreemptedRequestIsNotStarvedAfterItsDeadline) {
  // A low request admitted at once is preempted by a high flood that alone fills the slots;
  // once past its deadline it gets back in, and being admitted late, is not preempted again.
  const optim::PolicySet policies = build_optimizers(
      {priority({{"levels", int64_t{2}}, {"max_wait_ms", 2000.0}, {"min_run_ms", 0.0}})});
  SchedHarness h(config(), policies, kStepNs);
  h.add("low", 8, 40, 0);
  h.step();
  ASSERT_TRUE(h.running("low"));
  int64_t next = 0;
  bool preempted = false;
  while (h.clock().now_ns() < 30'000'000'000 && !h.timeline().finished_ns.count("low")) {
    for (int i = 0; i < 2; ++i) h.add("high" + std::to_string(next++), 8, kOutputTokens, 1);
    h.step();
    preempted = preempted || h.waiting("low");
  }
  EXPECT_TRUE(preempted);
  EXPECT_EQ(h.timeline().finished_ns.count("low"), 1u);
}

TEST(PriorityOverload, OneClassOnlyIsFirstComeFirstServed) {
  const auto arrivals = [](int64_t step) { return std::vector<int64_t>(step % 4 == 0 ? 2 : 1, 0); };
  const Overload fcfs = run({}, 20'000'000'000, arrivals);
  const Overload prio = run(build_optimizers({priority()}), 20'000'000'000, arrivals);
  EXPECT_EQ(prio.by_priority.at(0).waits_ns, fcfs.by_priority.at(0).waits_ns);
}

}  // namespace
}  // namespace optimate::testing
