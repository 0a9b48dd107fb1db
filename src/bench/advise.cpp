#include "bench/advise.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "bench/bench_target.h"
#include "bench/in_process.h"
#include "core/error.h"

namespace optimate::bench {
namespace {

double p99_or_nan(const SampleStats& s) { return s.count > 0 ? s.p99 : std::nan(""); }

std::string ms(double v) { return std::isfinite(v) ? fmt::format("{:.0f}", v) : "n/a"; }

}  // namespace

SloTargets parse_slo(const std::string& text) {
  SloTargets slo;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    if (eq == std::string::npos) fail(ErrorCode::kInvalidArgument, "--slo: '{}' is not KEY=VALUE", part);
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    double v = 0.0;
    try {
      size_t used = 0;
      v = std::stod(value, &used);
      if (used != value.size()) throw std::invalid_argument(value);
    } catch (const std::exception&) {
      fail(ErrorCode::kInvalidArgument, "--slo: {} must be a number of milliseconds, got '{}'", key, value);
    }
    if (!(v > 0)) fail(ErrorCode::kInvalidArgument, "--slo: {} must be > 0, got {}", key, v);
    if (key == "ttft_p99_ms") slo.ttft_p99_ms = v;
    else if (key == "tpot_p99_ms") slo.tpot_p99_ms = v;
    else fail(ErrorCode::kInvalidArgument, "--slo: unknown target '{}' (ttft_p99_ms, tpot_p99_ms)", key);
  }
  return slo;
}

Advice advise(const Workload& workload, const CostProfile& profile, const SloTargets& slo, const EngineConfig& base) {
  Advice a;
  a.slo = slo;
  a.traits = workload_traits(workload);
  const int64_t vocab = workload.spec.token_id_max + 1;
  auto run = [&](const Candidate& c) {
    BuiltEngine target = build_sim_engine(c.config, profile, vocab);
    a.target = target.target;
    RunResult r = run_in_process(target, workload);
    r.label = c.label;
    r.description = c.why;
    return r;
  };
  auto add_row = [&](const Candidate& c, RunSummary summary) {
    AdviceRow row{c, std::move(summary), false, 0.0};
    const double ttft = p99_or_nan(row.summary.ttft_ms), tpot = p99_or_nan(row.summary.tpot_ms);
    row.meets_slo = row.summary.failed == 0;
    if (slo.ttft_p99_ms > 0) {
      row.worst_ratio = std::max(row.worst_ratio, ttft / slo.ttft_p99_ms);
      row.meets_slo = row.meets_slo && ttft <= slo.ttft_p99_ms;
    }
    if (slo.tpot_p99_ms > 0) {
      row.worst_ratio = std::max(row.worst_ratio, tpot / slo.tpot_p99_ms);
      row.meets_slo = row.meets_slo && tpot <= slo.tpot_p99_ms;
    }
    a.rows.push_back(std::move(row));
  };
  // The default run answers the guide's questions about memory and compute; then the rest.
  const Candidate as_given{"default", "the static configuration as given", base};
  const RunResult first = run(as_given);
  RunSummary first_summary = summarize(first);
  add_run_traits(a.traits, first, first_summary, CostModel(profile));
  add_row(as_given, std::move(first_summary));
  const std::vector<Candidate> candidates = guide_candidates(a.traits, slo, base);
  for (size_t i = 1; i < candidates.size(); ++i) add_row(candidates[i], summarize(run(candidates[i])));
  a.considered = guide_considerations(a.traits);
  // Among the rows that meet the SLO, the most throughput; within 1% of it, the fewest
  // optimizers, then the lowest P99 TTFT. Without an SLO every row qualifies.
  auto better = [](const AdviceRow& x, const AdviceRow& y) {
    const double tx = x.summary.output_throughput, ty = y.summary.output_throughput;
    if (std::abs(tx - ty) > 0.01 * std::max(tx, ty)) return tx > ty;
    if (x.candidate.config.optimizers.size() != y.candidate.config.optimizers.size())
      return x.candidate.config.optimizers.size() < y.candidate.config.optimizers.size();
    return p99_or_nan(x.summary.ttft_ms) < p99_or_nan(y.summary.ttft_ms);
  };
  std::optional<size_t> best;
  for (size_t i = 0; i < a.rows.size(); ++i)
    if (a.rows[i].meets_slo && (!best || better(a.rows[i], a.rows[*best]))) best = i;
  if (best) {
    a.recommended = *best;
    a.verdict = slo.any() ? "meets the SLO with the most throughput" : "the most throughput (no SLO given)";
  } else {
    for (size_t i = 1; i < a.rows.size(); ++i)
      if (a.rows[i].worst_ratio < a.rows[a.recommended].worst_ratio) a.recommended = i;
    a.verdict = fmt::format("no configuration meets the SLO; this one comes closest ({:.0f}% of the target)",
                            a.rows[a.recommended].worst_ratio * 100);
  }
  return a;
}

std::string advice_markdown(const Advice& a) {
  const WorkloadTraits& t = a.traits;
  std::string out;
  out += fmt::format("Workload: {} requests", t.num_requests);
  if (t.offline) out += ", all at once (offline)";
  else out += fmt::format(" over {:.0f} s, {:.2f} req/s on average, arrival CV {:.2f} ({})", t.duration_s,
                          t.mean_rate_per_s, t.arrival_cv, t.regular() ? "regular" : "bursty");
  out += fmt::format("; prompts {:.0f} and outputs {:.0f} tokens on average; {} priority class{}; KV peak {:.0f}% "
                     "with the default configuration, {} preemptions ({})\n",
                     t.mean_prompt_tokens, t.mean_output_tokens, t.priorities.size(),
                     t.priorities.size() == 1 ? "" : "es", t.max_kv_usage * 100, t.default_preemptions,
                     t.memory_pressure() ? "memory runs short" : "no memory pressure");
  if (a.slo.any()) {
    out += "Objective: ";
    if (a.slo.ttft_p99_ms > 0) out += fmt::format("P99 TTFT <= {:.0f} ms ", a.slo.ttft_p99_ms);
    if (a.slo.tpot_p99_ms > 0) out += fmt::format("P99 TPOT <= {:.0f} ms ", a.slo.tpot_p99_ms);
    out += "(interactive), then the most throughput\n";
  } else {
    out += "Objective: the most throughput (no --slo: batch work)\n";
  }
  out += fmt::format("Request lengths (prompt + output): P99 {:.1f}x the median ({}); the default run's device busy "
                     "{:.0f}% of the time, {:.0f}% of that in compute-bound steps ({})\n",
                     t.length_spread, t.lengths_vary() ? "they vary widely" : "they do not vary widely",
                     100 * t.busy_fraction, 100 * t.compute_bound_share,
                     t.compute_bound() ? "compute-bound" : "not compute-bound");
  if (t.memory_pressure())
    out += "Memory runs short: kv_quant (8 bits) and adaptive with kv_quant are among the candidates.\n";
  out += fmt::format("\nSimulated on {}:\n\n", a.target);
  out += "| configuration | why | output tok/s | TTFT P50 ms | TTFT P99 ms | TPOT P99 ms | top class TTFT P99 ms "
         "| preemptions | SLO |\n|---|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < a.rows.size(); ++i) {
    const AdviceRow& r = a.rows[i];
    const RunSummary& s = r.summary;
    const double top = s.classes.empty() ? std::nan("") : p99_or_nan(s.classes.front().ttft_ms);
    out += fmt::format("| {}{} | {} | {:.0f} | {} | {} | {} | {} | {} | {} |\n", r.candidate.label,
                       i == a.recommended ? " **(recommended)**" : "", r.candidate.why, s.output_throughput,
                       ms(s.ttft_ms.count ? s.ttft_ms.median : std::nan("")), ms(p99_or_nan(s.ttft_ms)),
                       ms(p99_or_nan(s.tpot_ms)), ms(top), s.num_preemptions,
                       !a.slo.any() ? "-" : r.meets_slo ? "met" : "missed");
  }
  out += fmt::format("\nRecommended: {} - {}.\n", a.rows[a.recommended].candidate.label, a.verdict);
  if (!a.considered.empty()) {
    out += "\nAlso considered:\n\n";
    for (const std::string& line : a.considered) out += "- " + line + "\n";
  }
  return out;
}

std::string recommended_toml(const Advice& a) {
  const AdviceRow& row = a.rows[a.recommended];
  return fmt::format("# optimate advise: {} ({})\n{}", row.candidate.label, a.verdict,
                     row.candidate.config.to_toml(/*only_changed=*/true));
}

}  // namespace optimate::bench
