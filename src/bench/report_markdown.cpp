#include "bench/report_markdown.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace optimate::bench {
namespace {

std::string number(double v, int decimals) {
  if (std::isnan(v)) return "n/a";
  return fmt::format("{:.{}f}", v, decimals);
}

const ClassSummary* find_class(const RunSummary& run, int64_t priority) {
  for (const auto& c : run.classes)
    if (c.priority == priority) return &c;
  return nullptr;
}

// "Wait" of a class: its queue time when the target reports scheduling, else its TTFT.
double max_wait_ms(const ClassSummary* c) {
  if (!c) return NAN;
  return c->queue_ms.count > 0 ? c->queue_ms.max : c->ttft_ms.max;
}

struct Column {
  std::string header;
  int decimals;
  double (*get)(const RunSummary&, int64_t high, int64_t low);
};

}  // namespace

std::string with_delta(double value, double base, int decimals, bool is_base_row) {
  std::string s = number(value, decimals);
  if (is_base_row || std::isnan(value) || std::isnan(base) || base == 0.0) return s;
  return s + fmt::format(" ({:+.1f}%)", (value - base) / std::abs(base) * 100.0);
}

std::string render_markdown(const std::vector<RunSummary>& runs, const std::string& title) {
  std::string out = fmt::format("## {}\n\n", title);
  if (runs.empty()) return out + "No runs.\n";
  const RunSummary& base = runs.front();
  // Class columns appear when the workload mixes priorities: the most and least important.
  const bool has_classes = base.classes.size() >= 2;
  const int64_t high = has_classes ? base.classes.front().priority : 0;
  const int64_t low = has_classes ? base.classes.back().priority : 0;
  const bool has_steps = base.num_steps > 0;
  const bool has_turns = base.returning_ttft_ms.count > 0;
  const bool has_preemptions = std::any_of(runs.begin(), runs.end(), [](const RunSummary& r) {
    return r.engine.swap_preemptions > 0 || r.engine.recompute_preemptions > 0;
  });
  const bool has_host_tier = std::any_of(runs.begin(), runs.end(), [](const RunSummary& r) {
    return r.engine.host_prefix_queries_tokens > 0;
  });
  auto any = [&](double RunSummary::*field) {
    return std::any_of(runs.begin(), runs.end(), [&](const RunSummary& r) { return std::isfinite(r.*field); });
  };
  const bool has_gpu = any(&RunSummary::gpu_util_mean_pct) || any(&RunSummary::gpu_memory_peak_gib);
  const bool has_cpu = any(&RunSummary::cpu_util_pct);
  const bool has_cost = any(&RunSummary::usd_per_million_output_tokens);

  std::vector<Column> cols = {
      {"Throughput (out tok/s)", 0, [](const RunSummary& r, int64_t, int64_t) { return r.output_throughput; }},
      {"Requests/s", 2, [](const RunSummary& r, int64_t, int64_t) { return r.request_throughput; }},
      {"Mean TTFT (ms)", 1, [](const RunSummary& r, int64_t, int64_t) { return r.ttft_ms.mean; }},
      {"P99 TTFT (ms)", 1, [](const RunSummary& r, int64_t, int64_t) { return r.ttft_ms.p99; }},
      {"Mean TPOT (ms)", 2, [](const RunSummary& r, int64_t, int64_t) { return r.tpot_ms.mean; }},
  };
  if (has_classes) {
    cols.push_back({"", 1, [](const RunSummary& r, int64_t h, int64_t) {
                      const ClassSummary* c = find_class(r, h);
                      return c ? c->ttft_ms.p99 : NAN;
                    }});
    cols.back().header = fmt::format("{} P99 TTFT (ms)", base.classes.front().name);
    cols.push_back({"", 0, [](const RunSummary& r, int64_t, int64_t l) { return max_wait_ms(find_class(r, l)); }});
    cols.back().header = fmt::format("{} max wait (ms)", base.classes.back().name);
  }
  if (has_turns) {
    cols.push_back({"Returning P50 TTFT (ms)", 1, [](const RunSummary& r, int64_t, int64_t) { return r.returning_ttft_ms.median; }});
    cols.push_back({"Returning P99 TTFT (ms)", 1, [](const RunSummary& r, int64_t, int64_t) { return r.returning_ttft_ms.p99; }});
  }
  if (has_preemptions) {
    cols.push_back({"P99 E2E (ms)", 0, [](const RunSummary& r, int64_t, int64_t) { return r.e2el_ms.p99; }});
    cols.push_back({"Preempted (s)", 1, [](const RunSummary& r, int64_t, int64_t) { return r.engine.preempted_s; }});
  }
  if (has_host_tier || has_turns) {
    cols.push_back({"Prefix hits GPU %", 1, [](const RunSummary& r, int64_t, int64_t) { return 100.0 * r.prefix_hit_rate; }});
    cols.push_back({"Prefix hits host %", 1, [](const RunSummary& r, int64_t, int64_t) { return 100.0 * r.host_prefix_hit_rate; }});
  }
  if (has_steps)
    cols.push_back({"Busy %", 1, [](const RunSummary& r, int64_t, int64_t) { return r.busy_fraction * 100.0; }});
  // The seed's resource columns: the GPU's, or the CPU's for a run on the CPU; and the cost.
  if (has_gpu) {
    cols.push_back({"GPU util %", 1, [](const RunSummary& r, int64_t, int64_t) { return r.gpu_util_mean_pct; }});
    cols.push_back({"GPU mem (GiB)", 1, [](const RunSummary& r, int64_t, int64_t) { return r.gpu_memory_peak_gib; }});
  }
  if (has_cpu) {
    cols.push_back({"CPU util %", 1, [](const RunSummary& r, int64_t, int64_t) { return r.cpu_util_pct; }});
    cols.push_back({"Peak RSS (GiB)", 2, [](const RunSummary& r, int64_t, int64_t) { return r.peak_rss_gib; }});
  }
  if (has_cost)
    cols.push_back({"$/M out tok", 3,
                    [](const RunSummary& r, int64_t, int64_t) { return r.usd_per_million_output_tokens; }});

  out += "| Scenario | Configuration |";
  std::string rule = "|---|---|";
  for (const auto& c : cols) {
    out += " " + c.header + " |";
    rule += "---:|";
  }
  out += "\n" + rule + "\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunSummary& r = runs[i];
    out += fmt::format("| {} | {} |", r.label, r.description.empty() ? "-" : r.description);
    for (const auto& c : cols)
      out += " " + with_delta(c.get(r, high, low), c.get(base, high, low), c.decimals, i == 0) + " |";
    out += "\n";
  }
  std::set<std::string> gpu_why, host_why, engine_busy, prices;
  for (const auto& r : runs) {
    if (!std::isfinite(r.gpu_util_mean_pct)) gpu_why.insert(r.gpu_unavailable);
    if (!std::isfinite(r.cpu_util_pct)) host_why.insert(r.host_unavailable);
    if (r.gpu_util_source == "engine busy time") engine_busy.insert(r.label);
    if (r.price_per_hour > 0) prices.insert(fmt::format("${:.2f}/hour", r.price_per_hour));
  }
  if (!has_gpu) out += fmt::format("\nGPU utilization: not sampled ({}).\n", fmt::join(gpu_why, "; "));
  if (!engine_busy.empty())
    out += fmt::format("\nGPU util of {}: the engine's device busy time over the run (no NVML reading).\n",
                       fmt::join(engine_busy, ", "));
  if (has_cpu)
    out += "\nCPU util: the process's CPU time over the run's wall time and the CPUs it may use; peak RSS: its "
           "resident memory's high-water mark during the run.\n";
  if (has_cost) out += fmt::format("\nCost at {} per run's wall time.\n", fmt::join(prices, ", "));

  out += "\n### All metrics\n\n| Metric |";
  rule = "|---|";
  for (const auto& r : runs) {
    out += " " + r.label + " |";
    rule += "---:|";
  }
  out += "\n" + rule + "\n";
  auto row = [&](const std::string& name, auto get, int decimals) {
    out += "| " + name + " |";
    for (const auto& r : runs) out += " " + number(get(r), decimals) + " |";
    out += "\n";
  };
  row("Successful requests", [](const RunSummary& r) { return double(r.completed); }, 0);
  row("Failed requests", [](const RunSummary& r) { return double(r.failed); }, 0);
  row("Benchmark duration (s)", [](const RunSummary& r) { return r.duration_s; }, 2);
  row("Total input tokens", [](const RunSummary& r) { return double(r.total_input_tokens); }, 0);
  row("Total generated tokens", [](const RunSummary& r) { return double(r.total_output_tokens); }, 0);
  row("Request throughput (req/s)", [](const RunSummary& r) { return r.request_throughput; }, 2);
  row("Output token throughput (tok/s)", [](const RunSummary& r) { return r.output_throughput; }, 1);
  row("Total token throughput (tok/s)", [](const RunSummary& r) { return r.total_token_throughput; }, 1);
  const std::pair<const char*, const SampleStats RunSummary::*> latencies[] = {
      {"TTFT", &RunSummary::ttft_ms}, {"TPOT", &RunSummary::tpot_ms}, {"ITL", &RunSummary::itl_ms},
      {"E2E latency", &RunSummary::e2el_ms}, {"Queue time", &RunSummary::queue_ms}};
  for (const auto& [name, member] : latencies) {
    row(fmt::format("Mean {} (ms)", name), [&](const RunSummary& r) { return (r.*member).mean; }, 2);
    row(fmt::format("Median {} (ms)", name), [&](const RunSummary& r) { return (r.*member).median; }, 2);
    row(fmt::format("P95 {} (ms)", name), [&](const RunSummary& r) { return (r.*member).p95; }, 2);
    row(fmt::format("P99 {} (ms)", name), [&](const RunSummary& r) { return (r.*member).p99; }, 2);
  }
  row("Preemptions", [](const RunSummary& r) { return double(r.num_preemptions); }, 0);
  if (has_preemptions) {
    row("Preemptions by recompute", [](const RunSummary& r) { return double(r.engine.recompute_preemptions); }, 0);
    row("Preemptions by swap", [](const RunSummary& r) { return double(r.engine.swap_preemptions); }, 0);
    row("Blocks swapped out", [](const RunSummary& r) { return double(r.engine.swapped_out_blocks); }, 0);
    row("Preempted time, summed (s)", [](const RunSummary& r) { return r.engine.preempted_s; }, 2);
  }
  if (has_turns) {
    row("Median TTFT, returning turns (ms)", [](const RunSummary& r) { return r.returning_ttft_ms.median; }, 2);
    row("P99 TTFT, returning turns (ms)", [](const RunSummary& r) { return r.returning_ttft_ms.p99; }, 2);
  }
  if (has_host_tier || has_turns) {
    row("Prefix cache hit rate, GPU tier (%)", [](const RunSummary& r) { return 100.0 * r.prefix_hit_rate; }, 1);
    row("Prefix cache hit rate, host tier (%)", [](const RunSummary& r) { return 100.0 * r.host_prefix_hit_rate; }, 1);
  }
  if (has_steps) {
    row("Mean batch size (seqs)", [](const RunSummary& r) { return r.batch_size.mean; }, 1);
    row("P99 batch size (seqs)", [](const RunSummary& r) { return r.batch_size.p99; }, 1);
    row("Mean KV usage (%)", [](const RunSummary& r) { return r.mean_kv_usage * 100.0; }, 1);
    row("Max KV usage (%)", [](const RunSummary& r) { return r.max_kv_usage * 100.0; }, 1);
  }
  if (has_gpu) {
    row("Mean GPU util (%)", [](const RunSummary& r) { return r.gpu_util_mean_pct; }, 1);
    row("Max GPU util (%)", [](const RunSummary& r) { return r.gpu_util_pct.count ? r.gpu_util_pct.max : NAN; }, 1);
    row("Max GPU memory used (GiB)", [](const RunSummary& r) { return r.gpu_memory_peak_gib; }, 2);
  }
  if (has_cpu) {
    row("CPU util (%)", [](const RunSummary& r) { return r.cpu_util_pct; }, 1);
    row("CPU time (s)", [](const RunSummary& r) { return r.cpu_seconds; }, 2);
    row("CPUs", [](const RunSummary& r) { return r.num_cpus > 0 ? double(r.num_cpus) : NAN; }, 0);
    row("Peak RSS (GiB)", [](const RunSummary& r) { return r.peak_rss_gib; }, 3);
  }
  if (has_cost) row("Cost ($ per million output tokens)", [](const RunSummary& r) { return r.usd_per_million_output_tokens; }, 4);

  if (has_classes) {
    out += "\n### Per priority\n\n| Scenario | Class (priority) | Requests | Mean TTFT (ms) | P99 TTFT (ms) "
           "| P99 E2E (ms) | Max wait (ms) |\n|---|---|---:|---:|---:|---:|---:|\n";
    for (const auto& r : runs)
      for (const auto& c : r.classes)
        out += fmt::format("| {} | {} ({}) | {} | {} | {} | {} | {} |\n", r.label, c.name, c.priority,
                           c.completed, number(c.ttft_ms.mean, 1), number(c.ttft_ms.p99, 1),
                           number(c.e2el_ms.p99, 1), number(max_wait_ms(&c), 1));
  }
  return out;
}

}  // namespace optimate::bench
