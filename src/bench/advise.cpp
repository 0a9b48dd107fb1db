#include "bench/advise.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "bench/bench_target.h"
#include "bench/in_process.h"
#include "core/error.h"

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

OptimizerSpec priority_spec(const WorkloadTraits& t, const EngineConfig& base) {
  const int64_t most = t.priorities.front(), least = t.priorities.back();
  // Levels from the least important class up; the engine negates lower-first values.
  const bool higher_first = base.priority_order == PriorityOrder::kHigherFirst;
  return {"priority",
          {{"levels", static_cast<int64_t>(t.priorities.size())},
           {"lowest_priority", higher_first ? least : -most}},
          true};
}

OptimizerSpec adaptive_spec(const SloTargets& slo) {
  OptimizerSpec spec{"adaptive", {}, true};
  if (slo.ttft_p99_ms > 0) spec.options["ttft_p99_ms"] = slo.ttft_p99_ms;
  if (slo.tpot_p99_ms > 0) spec.options["tpot_p99_ms"] = slo.tpot_p99_ms;
  return spec;
}

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

WorkloadTraits workload_traits(const Workload& w) {
  WorkloadTraits t;
  t.num_requests = static_cast<int64_t>(w.requests.size());
  if (w.requests.empty()) return t;
  std::set<int64_t, std::greater<>> priorities;
  double prompt = 0.0, output = 0.0;
  for (const BenchRequest& r : w.requests) {
    priorities.insert(r.priority);
    prompt += static_cast<double>(r.prompt_len);
    output += static_cast<double>(r.max_tokens);
  }
  t.priorities.assign(priorities.begin(), priorities.end());
  t.mean_prompt_tokens = prompt / static_cast<double>(t.num_requests);
  t.mean_output_tokens = output / static_cast<double>(t.num_requests);
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
  if (t.regular()) {
    // Interactive: a very short hold at most; batch: a longer one pays (guide, section 5.3).
    const double wait_ms = t.interactive(slo) ? 20.0 : 100.0;
    out.push_back(with_optimizers(base, fmt::format("predictive max_wait_ms={:.0f}", wait_ms),
                                  t.interactive(slo) ? "regular arrivals, interactive: a hold of at most 20 ms"
                                                     : "regular arrivals, batch work: a longer hold fills batches",
                                  {{"predictive", {{"max_wait_ms", wait_ms}}, true}}));
  }
  out.push_back(with_optimizers(base, "adaptive",
                                slo.any() ? "retunes the batch limits toward the SLO as the load moves"
                                          : "raises the batch limits while requests queue (no SLO given)",
                                {adaptive_spec(slo)}));
  if (classes)
    out.push_back(with_optimizers(base, "adaptive + priority", "both: the load moves and requests differ in importance",
                                  {priority_spec(t, base), adaptive_spec(slo)}));
  return out;
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
    return summarize(r);
  };
  std::vector<Candidate> candidates = guide_candidates(a.traits, slo, base);
  for (size_t i = 0; i < candidates.size(); ++i) {
    AdviceRow row{candidates[i], run(candidates[i]), false, 0.0};
    if (i == 0) {  // the default run tells whether memory runs short
      a.traits.max_kv_usage = row.summary.max_kv_usage;
      a.traits.default_preemptions = row.summary.num_preemptions;
    }
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
  }
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
  if (t.memory_pressure())
    out += "Memory runs short: the guide's dynamic KV quantization is not in this build; the adaptive "
           "controller's KV quota protects the most important class instead.\n";
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
  return out;
}

std::string recommended_toml(const Advice& a) {
  const AdviceRow& row = a.rows[a.recommended];
  return fmt::format("# optimate advise: {} ({})\n{}", row.candidate.label, a.verdict,
                     row.candidate.config.to_toml(/*only_changed=*/true));
}

}  // namespace optimate::bench
