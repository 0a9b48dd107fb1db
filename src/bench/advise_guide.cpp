// The decision guide's questions (the traits of a workload and of its default run) and the
// configurations each answer points to. The figures quoted in the reasons are the project's
// measurements (docs/optimizers.md, docs/benchmarks.md).
#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "bench/advise.h"
#include "bench/stats.h"

namespace optimate::bench {
namespace {

Candidate with_optimizers(const EngineConfig& base, std::string label, std::string why,
                          std::vector<OptimizerSpec> optimizers) {
  Candidate c{std::move(label), std::move(why), base};
  for (OptimizerSpec& spec : optimizers) {
    std::erase_if(c.config.optimizers, [&](const OptimizerSpec& o) { return o.name == spec.name; });
    c.config.optimizers.push_back(std::move(spec));
  }
  return c;
}

bool higher_first(const EngineConfig& base) { return base.priority_order == PriorityOrder::kHigherFirst; }

// The most important class's priority in the clients' convention.
int64_t top_priority(const WorkloadTraits& t, const EngineConfig& base) {
  return higher_first(base) ? t.priorities.front() : t.priorities.back();
}

OptimizerSpec priority_spec(const WorkloadTraits& t, const EngineConfig& base) {
  const int64_t most = t.priorities.front(), least = t.priorities.back();
  // Levels from the least important class up; the engine negates lower-first values.
  return {"priority",
          {{"levels", static_cast<int64_t>(t.priorities.size())},
           {"lowest_priority", higher_first(base) ? least : -most}},
          true};
}

OptimizerSpec adaptive_spec(const SloTargets& slo) {
  OptimizerSpec spec{"adaptive", {}, true};
  if (slo.ttft_p99_ms > 0) spec.options["ttft_p99_ms"] = slo.ttft_p99_ms;
  if (slo.tpot_p99_ms > 0) spec.options["tpot_p99_ms"] = slo.tpot_p99_ms;
  return spec;
}

// 8 bits: int8 costs +0.02% perplexity on SmolLM2, the least of the three (fp8 +0.05%, int4
// +0.75%, whose blocks the H200 reads at a third of the copy rate). With several classes the
// most important stays at full precision; with one, every request may be quantized.
OptimizerSpec kv_quant_spec(const WorkloadTraits& t, const EngineConfig& base) {
  OptimizerSpec spec{"kv_quant", {{"bits", int64_t{8}}}, true};
  if (t.priorities.size() >= 2) spec.options["full_precision_min_priority"] = top_priority(t, base);
  else spec.options["priority_aware"] = false;
  return spec;
}

}  // namespace

WorkloadTraits workload_traits(const Workload& w) {
  WorkloadTraits t;
  t.num_requests = static_cast<int64_t>(w.requests.size());
  if (w.requests.empty()) return t;
  std::set<int64_t, std::greater<>> priorities;
  double prompt = 0.0, output = 0.0;
  std::vector<double> lengths;
  for (const BenchRequest& r : w.requests) {
    priorities.insert(r.priority);
    prompt += static_cast<double>(r.prompt_len);
    output += static_cast<double>(r.max_tokens);
    lengths.push_back(static_cast<double>(r.prompt_len + r.max_tokens));
  }
  t.priorities.assign(priorities.begin(), priorities.end());
  t.mean_prompt_tokens = prompt / static_cast<double>(t.num_requests);
  t.mean_output_tokens = output / static_cast<double>(t.num_requests);
  const SampleStats spread = sample_stats(lengths);
  t.length_spread = spread.median > 0 ? spread.p99 / spread.median : 0.0;
  t.duration_s = w.requests.back().arrival_s - w.requests.front().arrival_s;
  const ArrivalKind kind = w.spec.arrival.kind;
  t.offline = kind == ArrivalKind::kOffline || kind == ArrivalKind::kClosedLoop || t.duration_s <= 0.0;
  if (t.offline || t.num_requests < 3) return t;
  t.mean_rate_per_s = static_cast<double>(t.num_requests - 1) / t.duration_s;
  const double mean_gap = t.duration_s / static_cast<double>(t.num_requests - 1);
  double var = 0.0;
  for (size_t i = 1; i < w.requests.size(); ++i) {
    const double d = w.requests[i].arrival_s - w.requests[i - 1].arrival_s - mean_gap;
    var += d * d;
  }
  t.arrival_cv = std::sqrt(var / static_cast<double>(t.num_requests - 1)) / mean_gap;
  return t;
}

void add_run_traits(WorkloadTraits& t, const RunResult& run, const RunSummary& s, const CostModel& cost) {
  t.max_kv_usage = s.max_kv_usage;
  t.default_preemptions = s.num_preemptions;
  t.busy_fraction = s.busy_fraction;
  t.ridge_tokens = cost.ridge_tokens();
  double busy_s = 0.0, compute_s = 0.0;
  for (const StepSample& step : run.steps) {
    busy_s += step.duration_s;
    if (static_cast<double>(step.num_tokens) >= t.ridge_tokens) compute_s += step.duration_s;
  }
  t.compute_bound_share = busy_s > 0 ? compute_s / busy_s : 0.0;
}

std::vector<Candidate> guide_candidates(const WorkloadTraits& t, const SloTargets& slo, const EngineConfig& base) {
  std::vector<Candidate> out;
  out.push_back({"default", "the static configuration as given", base});
  // The batch limit the static configuration would have to guess: half, twice and four times.
  for (int64_t factor : {-2, 2, 4}) {
    Candidate c{"", "", base};
    c.config.max_num_seqs = factor < 0 ? std::max<int64_t>(1, base.max_num_seqs / 2) : base.max_num_seqs * factor;
    c.label = fmt::format("static max_num_seqs={}", c.config.max_num_seqs);
    c.why = factor < 0 ? "smaller batches: shorter steps (TPOT)" : "larger batches: more throughput per step";
    out.push_back(std::move(c));
  }
  const bool classes = t.priorities.size() >= 2;
  if (classes)
    out.push_back(with_optimizers(base, "priority", "requests differ in importance (guide: enable priority scheduling)",
                                  {priority_spec(t, base)}));
  // A hold can only fill time the device would idle: arrivals regular, the device not saturated.
  if (t.regular() && !t.saturated()) {
    const bool interactive = t.interactive(slo);
    const double wait_ms = interactive ? kGuide.predictive_interactive_wait_ms : kGuide.predictive_batch_wait_ms;
    out.push_back(with_optimizers(
        base, fmt::format("predictive max_wait_ms={:.0f}", wait_ms),
        interactive ? fmt::format("regular arrivals, interactive: a hold at the low end of the measured knee ({:.0f} ms)", wait_ms)
                    : fmt::format("regular arrivals, batch work: a hold at the measured knee ({:.0f} ms), past which "
                                  "GPU time stops falling", wait_ms),
        {{"predictive", {{"max_wait_ms", wait_ms}}, true}}));
  }
  if (t.memory_pressure()) {
    out.push_back(with_optimizers(base, "kv_quant bits=8",
                                  classes ? "memory short: KV of the less important classes in int8 while the cache is full"
                                          : "memory short: KV in int8 while the cache is full",
                                  {kv_quant_spec(t, base)}));
    OptimizerSpec quant = kv_quant_spec(t, base);
    quant.options["activation_threshold"] = 0.95;  // the controller turns it on while requests wait
    out.push_back(with_optimizers(base, "adaptive + kv_quant",
                                  "memory short and the load moves: the controller strengthens KV quantization "
                                  "only while requests wait for blocks",
                                  {quant, adaptive_spec(slo)}));
  }
  if ((t.memory_pressure() && t.default_preemptions > 0) || t.lengths_vary()) {
    Candidate c{"preemption_mode=auto",
                t.lengths_vary() ? "request lengths vary widely: a long victim swaps to host memory instead of "
                                   "computing its prefix again"
                                 : "requests are preempted: swap or recompute each victim by cost",
                base};
    c.config.preemption_mode = PreemptionMode::kAuto;
    out.push_back(std::move(c));
  }
  if (t.lengths_vary() && classes) {
    OptimizerSpec quota = adaptive_spec(slo);
    quota.options["kv_high"] = 0.8;
    quota.options["kv_low"] = 0.6;
    out.push_back(with_optimizers(base, "adaptive, KV quota from 80%",
                                  "request lengths vary widely: a class's long generations capped at half the pool, "
                                  "a reserve kept for the most important",
                                  {quota}));
  }
  // Monitoring and the controller are always considered (the guide's last line).
  out.push_back(with_optimizers(base, "adaptive",
                                slo.any() ? "always considered: retunes the batch limits toward the SLO as the load moves"
                                          : "always considered: raises the batch limits while requests queue (no SLO given)",
                                {adaptive_spec(slo)}));
  if (classes)
    out.push_back(with_optimizers(base, "adaptive + priority", "both: the load moves and requests differ in importance",
                                  {priority_spec(t, base), adaptive_spec(slo)}));
  return out;
}

std::vector<std::string> guide_considerations(const WorkloadTraits& t) {
  std::vector<std::string> out;
  if (t.compute_bound())
    out.push_back(fmt::format(
        "Compute-bound ({:.0f}% of the device's busy time in steps of {:.0f} tokens or more, past the roofline's ridge): "
        "kernel variants decide the rest, and the simulator has one cost per step, so this table cannot rank them. "
        "Measured on the H200: `--quantization fp8` (FP8 weights) 1.47x batch-1 decode and 1.11x served output tok/s; "
        "overlapped steps (`--async-scheduling`, on by default) +5%. Measure them on the real backend: "
        "`optimate bench --workload W --backend cuda --compare CONFIG --set quantization=fp8`.",
        100 * t.compute_bound_share, t.ridge_tokens));
  out.push_back("Monitoring, always: `/metrics` exports the per-priority queues and waits, the batch size distribution, "
                "the KV precision mix and every optimizer's fallbacks; `--decision-log FILE` explains each decision; the "
                "adaptive controller is among the rows above whatever the traffic.");
  return out;
}

}  // namespace optimate::bench
