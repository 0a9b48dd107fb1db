// The preemption mode by cost: with the H200 figures of the Llama-3-8B shape (128 KiB of KV a
// token, a 50 GB/s host link, 25 ms steps, 40 us a prefill token), a victim whose prefix costs
// less to recompute than a step plus the copies recomputes, a longer one swaps; the forced
// modes, and auto without swap space or before any prefill step was measured.
#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/preempt_mode_policy.h"

namespace optimate::optim {
namespace {

constexpr int64_t kBytesPerToken = 128 * 1024;

// host_link_bytes_per_s 0 here means no swap space.
SchedulerView view(double host_link_bytes_per_s, double prefill_ns_per_token) {
  SchedulerView v;
  v.kv.host_link_bytes_per_s = host_link_bytes_per_s;
  v.kv.num_host_blocks = host_link_bytes_per_s > 0.0 ? 4096 : 0;
  v.prefill_ns_per_token = prefill_ns_per_token;
  v.mean_step_ns = 25e6;
  return v;
}

RequestView victim(int64_t num_computed_tokens) {
  RequestView r;
  r.num_computed_tokens = num_computed_tokens;
  r.num_kv_bytes = num_computed_tokens * kBytesPerToken;
  return r;
}

struct Case {
  const char* name;
  PreemptionMode setting;
  double host_link;
  double ns_per_token;
  int64_t tokens;
  PreemptMode mode;
  std::string_view reason;
};

TEST(PreemptModePolicy, ChoosesByCost) {
  // Swapping 1000 tokens: 2 x 131 MB / 50 GB/s = 5.2 ms + 25 ms = 30.2 ms; recomputing: 40 ms.
  // The break-even is about 760 tokens.
  const Case cases[] = {
      {"short prefix recomputes", PreemptionMode::kAuto, 50e9, 40e3, 500, PreemptMode::kRecompute, "cost"},
      {"long prefix swaps", PreemptionMode::kAuto, 50e9, 40e3, 1000, PreemptMode::kSwap, "cost"},
      {"16k tokens swap", PreemptionMode::kAuto, 50e9, 40e3, 16000, PreemptMode::kSwap, "cost"},
      {"a slow link makes even long prefixes recompute", PreemptionMode::kAuto, 2e9, 40e3, 16000,
       PreemptMode::kRecompute, "cost"},
      {"no prefill step measured yet", PreemptionMode::kAuto, 50e9, 0.0, 16000, PreemptMode::kRecompute,
       "no_estimate"},
      {"no swap space", PreemptionMode::kAuto, 0.0, 40e3, 16000, PreemptMode::kRecompute, "no_swap_space"},
      {"forced swap, short prefix", PreemptionMode::kSwap, 50e9, 40e3, 16, PreemptMode::kSwap, "forced"},
      {"forced swap without swap space", PreemptionMode::kSwap, 0.0, 40e3, 16, PreemptMode::kRecompute,
       "no_swap_space"},
      {"forced recompute, long prefix", PreemptionMode::kRecompute, 50e9, 40e3, 16000, PreemptMode::kRecompute,
       "forced"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CostPreemptModePolicy policy(c.setting);
    const PreemptModeChoice choice = policy.choose_mode(view(c.host_link, c.ns_per_token), victim(c.tokens));
    EXPECT_EQ(choice.mode, c.mode);
    EXPECT_EQ(choice.reason, c.reason);
  }
}

// With prefix caching a recomputing victim leaves its full blocks cached for its resumption:
// only the tokens past its last full block count, so even a long prefix recomputes.
TEST(PreemptModePolicy, CachedFullBlocksAreNotRecomputed) {
  SchedulerView v = view(50e9, 40e3);
  v.kv.block_size = 16;
  v.kv.prefix_caching = true;
  RequestView r = victim(16010);
  r.num_full_blocks = 1000;
  CostPreemptModePolicy policy(PreemptionMode::kAuto);
  const PreemptModeChoice cached = policy.choose_mode(v, r);
  EXPECT_EQ(cached.mode, PreemptMode::kRecompute);
  EXPECT_NE(cached.detail.find("10 of its 16010 tokens"), std::string::npos) << cached.detail;
  EXPECT_EQ(preempt_cost(v, r).recompute_tokens, 10);
  v.kv.prefix_caching = false;
  EXPECT_EQ(policy.choose_mode(v, r).mode, PreemptMode::kSwap);
  EXPECT_EQ(preempt_cost(v, r).recompute_tokens, 16010);
}

TEST(PreemptModePolicy, ExplainsItsChoiceAndCountsIt) {
  CostPreemptModePolicy policy(PreemptionMode::kAuto);
  const PreemptModeChoice c = policy.choose_mode(view(50e9, 40e3), victim(2048));
  EXPECT_EQ(c.mode, PreemptMode::kSwap);
  EXPECT_NE(c.detail.find("2048 of its 2048 tokens"), std::string::npos) << c.detail;
  EXPECT_NE(c.detail.find("256.0 MiB"), std::string::npos) << c.detail;
  policy.choose_mode(view(50e9, 40e3), victim(10));
  const auto counters = policy.counters();
  ASSERT_EQ(counters.size(), 2u);
  EXPECT_EQ(counters[0].name, "swap_choices");
  EXPECT_EQ(counters[0].value, 1);
  EXPECT_EQ(counters[1].value, 1);
}

TEST(PreemptModePolicy, ParsesTheSetting) {
  EXPECT_EQ(parse_choice<PreemptionMode>("auto", "preemption-mode"), PreemptionMode::kAuto);
  EXPECT_EQ(parse_choice<PreemptionMode>("swap", "preemption-mode"), PreemptionMode::kSwap);
  EXPECT_EQ(parse_choice<PreemptionMode>("recompute", "preemption-mode"), PreemptionMode::kRecompute);
  EXPECT_THROW(parse_choice<PreemptionMode>("swapping", "preemption-mode"), Error);
}

}  // namespace
}  // namespace optimate::optim
