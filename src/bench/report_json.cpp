#include "bench/report_json.h"

#include <cmath>

#include "bench/step_profile_report.h"

namespace optimate::bench {
namespace {

using nlohmann::json;

json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json stats_json(const SampleStats& s) {
  return {{"count", s.count}, {"mean", num(s.mean)},  {"median", num(s.median)}, {"std", num(s.std)},
          {"p95", num(s.p95)},  {"p99", num(s.p99)}, {"max", num(s.max)}};
}

json length_json(const LengthSpec& l) {
  switch (l.kind) {
    case LengthKind::kFixed: return {{"kind", "fixed"}, {"value", l.value}};
    case LengthKind::kUniform: return {{"kind", "uniform"}, {"min", l.min}, {"max", l.max}};
    case LengthKind::kLognormal:
      return {{"kind", "lognormal"}, {"mean", l.mean}, {"sigma", l.sigma}, {"min", l.min}, {"max", l.max}};
  }
  return nullptr;
}

}  // namespace

json workload_to_json(const WorkloadSpec& s) {
  json j = {{"name", s.name}, {"seed", s.seed}, {"num_requests", s.num_requests},
            {"ignore_eos", s.ignore_eos}, {"token_id_range", {s.token_id_min, s.token_id_max}},
            {"prompt", length_json(s.prompt)}, {"output", length_json(s.output)}};
  const ArrivalSpec& a = s.arrival;
  json arrival = {{"kind", arrival_kind_name(a.kind)}};
  switch (a.kind) {
    case ArrivalKind::kConstant:
    case ArrivalKind::kPoisson: arrival["rate"] = a.rate_per_s; break;
    case ArrivalKind::kGamma: arrival["rate"] = a.rate_per_s; arrival["burstiness"] = a.burstiness; break;
    case ArrivalKind::kBurst:
      arrival.update({{"on_s", a.on_s}, {"off_s", a.off_s}, {"on_rate", a.on_rate_per_s}, {"off_rate", a.off_rate_per_s}});
      break;
    case ArrivalKind::kClosedLoop: arrival["concurrency"] = a.concurrency; break;
    case ArrivalKind::kPhases:
      arrival["phases"] = json::array();
      for (const ArrivalPhase& p : a.phases) arrival["phases"].push_back({{"duration_s", p.duration_s}, {"rate", p.rate_per_s}});
      break;
    default: break;
  }
  j["arrival"] = arrival;
  j["priorities"] = json::array();
  for (const auto& c : s.priorities)
    j["priorities"].push_back({{"name", c.name}, {"priority", c.priority}, {"weight", c.weight}});
  if (s.prefix.num_groups > 0)
    j["prefix"] = {{"groups", s.prefix.num_groups}, {"length", s.prefix.length}, {"fraction", s.prefix.fraction}};
  if (s.trace) j["trace"] = s.trace->path;
  return j;
}

json summary_to_json(const RunSummary& r) {
  json classes = json::array();
  for (const auto& c : r.classes)
    classes.push_back({{"name", c.name}, {"priority", c.priority}, {"completed", c.completed},
                       {"failed", c.failed}, {"ttft_ms", stats_json(c.ttft_ms)},
                       {"e2el_ms", stats_json(c.e2el_ms)}, {"queue_ms", stats_json(c.queue_ms)}});
  json histogram = json::object();
  for (auto [size, steps] : r.batch_size_histogram) histogram[std::to_string(size)] = steps;
  return {{"completed", r.completed},
          {"failed", r.failed},
          {"duration_s", num(r.duration_s)},
          {"total_input_tokens", r.total_input_tokens},
          {"total_output_tokens", r.total_output_tokens},
          {"request_throughput", num(r.request_throughput)},
          {"output_throughput", num(r.output_throughput)},
          {"total_token_throughput", num(r.total_token_throughput)},
          {"ttft_ms", stats_json(r.ttft_ms)},
          {"tpot_ms", stats_json(r.tpot_ms)},
          {"itl_ms", stats_json(r.itl_ms)},
          {"e2el_ms", stats_json(r.e2el_ms)},
          {"queue_ms", stats_json(r.queue_ms)},
          {"num_preemptions", r.num_preemptions},
          {"returning_ttft_ms", stats_json(r.returning_ttft_ms)},
          {"engine", {{"prefix_queries_tokens", r.engine.prefix_queries_tokens},
                      {"prefix_hits_tokens", r.engine.prefix_hits_tokens},
                      {"prefix_hit_rate", num(r.prefix_hit_rate)},
                      {"host_prefix_queries_tokens", r.engine.host_prefix_queries_tokens},
                      {"host_prefix_hits_tokens", r.engine.host_prefix_hits_tokens},
                      {"host_prefix_hit_rate", num(r.host_prefix_hit_rate)},
                      {"recompute_preemptions", r.engine.recompute_preemptions},
                      {"swap_preemptions", r.engine.swap_preemptions},
                      {"swapped_out_blocks", r.engine.swapped_out_blocks},
                      {"swapped_in_blocks", r.engine.swapped_in_blocks},
                      {"preempted_s", num(r.engine.preempted_s)}}},
          {"classes", classes},
          {"num_steps", r.num_steps},
          {"batch_size", stats_json(r.batch_size)},
          {"batch_size_histogram", histogram},
          {"busy_fraction", num(r.busy_fraction)},
          {"mean_kv_usage", num(r.mean_kv_usage)},
          {"max_kv_usage", num(r.max_kv_usage)},
          {"gpu", {{"device", r.gpu_device}, {"unavailable", r.gpu_unavailable},
                   {"util_pct", stats_json(r.gpu_util_pct)}, {"memory_used_gib", stats_json(r.gpu_memory_used_gib)},
                   {"memory_total_gib", num(r.gpu_memory_total_gib)}, {"util_mean_pct", num(r.gpu_util_mean_pct)},
                   {"util_source", r.gpu_util_source}, {"memory_peak_gib", num(r.gpu_memory_peak_gib)}}},
          {"host", {{"unavailable", r.host_unavailable}, {"cpu_util_pct", num(r.cpu_util_pct)},
                    {"cpu_seconds", num(r.cpu_seconds)}, {"num_cpus", r.num_cpus}, {"peak_rss_gib", num(r.peak_rss_gib)}}},
          {"price_per_hour", num(r.price_per_hour)},
          {"usd_per_million_output_tokens", num(r.usd_per_million_output_tokens)}};
}

json run_to_json(const RunResult& run, const RunSummary& summary) {
  json records = json::array();
  for (const RequestRecord& r : run.records) {
    json times = json::array();
    for (double t : r.token_times_s) times.push_back(num(t));
    records.push_back({{"id", r.id}, {"priority", r.priority}, {"priority_class", r.priority_class},
                       {"arrival_s", num(r.arrival_s)}, {"scheduled_s", num(r.scheduled_s)},
                       {"first_token_s", num(r.first_token_s)}, {"finish_s", num(r.finish_s)},
                       {"token_times_s", times}, {"prompt_tokens", r.prompt_tokens},
                       {"output_tokens", r.output_tokens}, {"num_preemptions", r.num_preemptions},
                       {"turn", r.turn},
                       {"success", r.success}, {"error", r.error}});
  }
  json steps = json::array();
  for (const StepSample& s : run.steps)
    steps.push_back({{"t_s", num(s.t_s)}, {"duration_s", num(s.duration_s)},
                     {"batch_size", s.batch_size}, {"num_tokens", s.num_tokens},
                     {"num_waiting", s.num_waiting}, {"num_running", s.num_running},
                     {"kv_usage", num(s.kv_usage)}});
  json gpu_samples = json::array();
  for (const GpuSample& g : run.gpu.samples)
    gpu_samples.push_back({{"t_s", num(g.t_s)}, {"util_pct", num(g.util_pct)}, {"memory_used_bytes", num(g.memory_used_bytes)}});
  json out = {{"label", run.label}, {"description", run.description}, {"target", run.target},
              {"summary", summary_to_json(summary)}, {"records", records}, {"steps", steps},
              {"gpu_samples", gpu_samples}};
  if (run.step_profile) out["step_profile"] = step_profile_json(*run.step_profile);
  else out["step_profile_unavailable"] = run.step_profile_unavailable;
  return out;
}

json report_to_json(const WorkloadSpec& spec, const std::vector<RunResult>& runs,
                    const std::vector<RunSummary>& summaries) {
  json j = {{"workload", workload_to_json(spec)}, {"runs", json::array()}};
  for (size_t i = 0; i < runs.size(); ++i) j["runs"].push_back(run_to_json(runs[i], summaries[i]));
  return j;
}

}  // namespace optimate::bench
