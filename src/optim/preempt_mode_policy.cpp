#include "optim/preempt_mode_policy.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace optimate::optim {

const char* preempt_mode_name(PreemptMode mode) { return mode == PreemptMode::kSwap ? "swap" : "recompute"; }

PreemptCost preempt_cost(const SchedulerView& view, const RequestView& victim) {
  PreemptCost c;
  const double bw = view.kv.host_link_bytes_per_s;
  c.swap_ns = bw > 0.0 ? 2.0 * static_cast<double>(victim.num_kv_bytes) / bw * 1e9 + view.mean_step_ns
                       : std::numeric_limits<double>::infinity();
  c.recompute_tokens = victim.num_computed_tokens;
  if (view.kv.prefix_caching)
    c.recompute_tokens = std::max<int64_t>(0, c.recompute_tokens - victim.num_full_blocks * view.kv.block_size);
  c.recompute_ns = static_cast<double>(c.recompute_tokens) * view.prefill_ns_per_token;
  return c;
}

PreemptModeChoice CostPreemptModePolicy::choose_mode(const SchedulerView& view, const RequestView& victim) {
  PreemptModeChoice out;
  const bool has_swap = view.kv.num_host_blocks > 0;
  if (setting_ == PreemptionMode::kRecompute) {
    out = {PreemptMode::kRecompute, "forced", "preemption mode recompute"};
  } else if (!has_swap) {
    out = {PreemptMode::kRecompute, "no_swap_space", "no host swap space"};
  } else if (setting_ == PreemptionMode::kSwap) {
    out = {PreemptMode::kSwap, "forced", "preemption mode swap"};
  } else if (view.prefill_ns_per_token <= 0.0 || view.kv.host_link_bytes_per_s <= 0.0) {
    out = {PreemptMode::kRecompute, "no_estimate",
           view.prefill_ns_per_token <= 0.0 ? "no prefill step measured yet" : "host-link bandwidth unknown"};
  } else {
    const PreemptCost c = preempt_cost(view, victim);
    out.mode = c.swap_ns < c.recompute_ns ? PreemptMode::kSwap : PreemptMode::kRecompute;
    out.reason = "cost";
    out.detail = fmt::format("swap {:.2f} ms ({:.1f} MiB at {:.1f} GB/s, twice, + a {:.2f} ms step) {} recompute "
                             "{:.2f} ms ({} of its {} tokens at {:.1f} us)", c.swap_ns * 1e-6,
                             static_cast<double>(victim.num_kv_bytes) / (1 << 20), view.kv.host_link_bytes_per_s * 1e-9,
                             view.mean_step_ns * 1e-6, out.mode == PreemptMode::kSwap ? "<" : ">=",
                             c.recompute_ns * 1e-6, c.recompute_tokens, victim.num_computed_tokens,
                             view.prefill_ns_per_token * 1e-3);
  }
  ++(out.mode == PreemptMode::kSwap ? num_swap_ : num_recompute_);
  return out;
}

std::vector<PolicyCounter> CostPreemptModePolicy::counters() const {
  return {{"swap_choices", static_cast<double>(num_swap_)}, {"recompute_choices", static_cast<double>(num_recompute_)}};
}

}  // namespace optimate::optim
