#include "bench/summary.h"

#include <algorithm>
#include <cmath>

namespace optimate::bench {
namespace {

struct Samples {
  std::vector<double> ttft, tpot, itl, e2el, queue;
};

void add_request(const RequestRecord& r, Samples& s) {
  const double ttft = r.first_token_s - r.arrival_s;
  const double e2el = r.finish_s - r.arrival_s;
  s.ttft.push_back(ttft * 1e3);
  s.e2el.push_back(e2el * 1e3);
  if (r.output_tokens > 1) s.tpot.push_back((e2el - ttft) * 1e3 / static_cast<double>(r.output_tokens - 1));
  for (size_t i = 1; i < r.token_times_s.size(); ++i)
    s.itl.push_back((r.token_times_s[i] - r.token_times_s[i - 1]) * 1e3);
  if (!std::isnan(r.scheduled_s)) s.queue.push_back((r.scheduled_s - r.arrival_s) * 1e3);
}

}  // namespace

RunSummary summarize(const RunResult& run) {
  RunSummary out;
  out.label = run.label;
  out.description = run.description;
  out.target = run.target;
  Samples all;
  std::vector<double> returning_ttft;
  std::map<int64_t, std::pair<ClassSummary, Samples>> classes;
  double end_s = 0.0;
  for (const RequestRecord& r : run.records) {
    auto& [cls, samples] = classes[r.priority];
    cls.priority = r.priority;
    if (cls.name.empty()) cls.name = r.priority_class;
    out.num_preemptions += r.num_preemptions;
    if (!r.success) {
      ++out.failed;
      ++cls.failed;
      continue;
    }
    ++out.completed;
    ++cls.completed;
    out.total_input_tokens += r.prompt_tokens;
    out.total_output_tokens += r.output_tokens;
    end_s = std::max(end_s, r.finish_s);
    add_request(r, all);
    add_request(r, samples);
    if (r.turn > 0) returning_ttft.push_back((r.first_token_s - r.arrival_s) * 1e3);
  }
  out.returning_ttft_ms = sample_stats(returning_ttft);
  out.engine = run.engine;
  auto rate = [](int64_t hits, int64_t queries) {
    return queries > 0 ? static_cast<double>(hits) / static_cast<double>(queries) : std::nan("");
  };
  out.prefix_hit_rate = rate(run.engine.prefix_hits_tokens, run.engine.prefix_queries_tokens);
  out.host_prefix_hit_rate = rate(run.engine.host_prefix_hits_tokens, run.engine.host_prefix_queries_tokens);
  out.num_preemptions += run.num_preemptions;
  out.duration_s = end_s;
  if (end_s > 0.0) {
    out.request_throughput = static_cast<double>(out.completed) / end_s;
    out.output_throughput = static_cast<double>(out.total_output_tokens) / end_s;
    out.total_token_throughput =
        static_cast<double>(out.total_input_tokens + out.total_output_tokens) / end_s;
  }
  out.ttft_ms = sample_stats(all.ttft);
  out.tpot_ms = sample_stats(all.tpot);
  out.itl_ms = sample_stats(all.itl);
  out.e2el_ms = sample_stats(all.e2el);
  out.queue_ms = sample_stats(all.queue);
  for (auto it = classes.rbegin(); it != classes.rend(); ++it) {
    auto& [cls, samples] = it->second;
    cls.ttft_ms = sample_stats(samples.ttft);
    cls.e2el_ms = sample_stats(samples.e2el);
    cls.queue_ms = sample_stats(samples.queue);
    out.classes.push_back(cls);
  }

  std::vector<double> batch;
  double busy_s = 0.0, kv_sum = 0.0;
  for (const StepSample& s : run.steps) {
    batch.push_back(static_cast<double>(s.batch_size));
    ++out.batch_size_histogram[s.batch_size];
    busy_s += s.duration_s;
    kv_sum += s.kv_usage;
    out.max_kv_usage = std::max(out.max_kv_usage, s.kv_usage);
  }
  out.num_steps = static_cast<int64_t>(run.steps.size());
  out.batch_size = sample_stats(batch);
  if (!run.steps.empty()) out.mean_kv_usage = kv_sum / static_cast<double>(run.steps.size());
  if (end_s > 0.0) out.busy_fraction = std::min(1.0, busy_s / end_s);

  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::vector<double> util, memory_gib;
  for (const GpuSample& g : run.gpu.samples) {
    util.push_back(g.util_pct);
    memory_gib.push_back(g.memory_used_bytes / kGiB);
  }
  out.gpu_device = run.gpu.device;
  out.gpu_unavailable = run.gpu.samples.empty() && run.gpu.unavailable.empty() ? "not sampled" : run.gpu.unavailable;
  out.gpu_util_pct = sample_stats(util);
  out.gpu_memory_used_gib = sample_stats(memory_gib);
  out.gpu_memory_total_gib = run.gpu.memory_total_bytes / kGiB;
  if (out.gpu_util_pct.count > 0) {
    out.gpu_util_mean_pct = out.gpu_util_pct.mean;
    out.gpu_util_source = "NVML";
  } else if (std::isfinite(run.gpu.engine_busy_pct)) {
    out.gpu_util_mean_pct = run.gpu.engine_busy_pct;
    out.gpu_util_source = "engine busy time";
  }
  if (out.gpu_memory_used_gib.count > 0) out.gpu_memory_peak_gib = out.gpu_memory_used_gib.max;
  else if (run.gpu.engine_memory_bytes > 0) out.gpu_memory_peak_gib = run.gpu.engine_memory_bytes / kGiB;

  const HostUsage& host = run.host;
  out.host_unavailable = host.unavailable;
  if (host.unavailable.empty() && host.wall_s > 0 && host.num_cpus > 0) {
    out.cpu_seconds = host.cpu_seconds;
    out.num_cpus = host.num_cpus;
    out.cpu_util_pct = 100.0 * host.cpu_seconds / (host.wall_s * static_cast<double>(host.num_cpus));
    out.peak_rss_gib = host.peak_resident_bytes / kGiB;
  } else if (host.unavailable.empty()) {
    out.host_unavailable = "not measured";
  }
  out.price_per_hour = run.price_per_hour;
  if (run.price_per_hour > 0 && out.output_throughput > 0)
    out.usd_per_million_output_tokens = run.price_per_hour / 3600.0 / out.output_throughput * 1e6;
  return out;
}

}  // namespace optimate::bench
