#include "bench/plots.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "bench/svg_chart.h"

namespace optimate::bench {
namespace {

std::vector<double> latencies_ms(const RunResult& run, LatencyMetric metric) {
  std::vector<double> v;
  for (const RequestRecord& r : run.records) {
    if (!r.success) continue;
    const double ttft = r.first_token_s - r.arrival_s;
    switch (metric) {
      case LatencyMetric::kTtft: v.push_back(ttft * 1e3); break;
      case LatencyMetric::kE2e: v.push_back((r.finish_s - r.arrival_s) * 1e3); break;
      case LatencyMetric::kTpot:
        if (r.output_tokens > 1) v.push_back((r.finish_s - r.first_token_s) * 1e3 / double(r.output_tokens - 1));
        break;
      case LatencyMetric::kItl:
        for (size_t i = 1; i < r.token_times_s.size(); ++i)
          v.push_back((r.token_times_s[i] - r.token_times_s[i - 1]) * 1e3);
        break;
      case LatencyMetric::kQueue:
        if (!std::isnan(r.scheduled_s)) v.push_back((r.scheduled_s - r.arrival_s) * 1e3);
        break;
    }
  }
  return v;
}

const char* metric_name(LatencyMetric m) {
  switch (m) {
    case LatencyMetric::kTtft: return "TTFT";
    case LatencyMetric::kTpot: return "TPOT";
    case LatencyMetric::kItl: return "ITL";
    case LatencyMetric::kE2e: return "E2E latency";
    case LatencyMetric::kQueue: return "Queue time";
  }
  return "";
}

double run_end_s(const RunResult& run) {
  double end = 0.0;
  for (const auto& r : run.records)
    if (std::isfinite(r.finish_s)) end = std::max(end, r.finish_s);
  return end;
}

}  // namespace

std::string plot_latency_cdf(const std::vector<RunResult>& runs, LatencyMetric metric) {
  std::vector<Series> series;
  double lo = INFINITY, hi = 0.0;
  for (const RunResult& run : runs) {
    std::vector<double> v = latencies_ms(run, metric);
    std::sort(v.begin(), v.end());
    Series s{.name = run.label, .steps = true};
    for (size_t i = 0; i < v.size(); ++i) {
      s.x.push_back(v[i]);
      s.y.push_back(double(i + 1) / double(v.size()));
      if (v[i] > 0) lo = std::min(lo, v[i]);
      hi = std::max(hi, v[i]);
    }
    series.push_back(std::move(s));
  }
  ChartSpec spec{.title = std::string(metric_name(metric)) + " distribution",
                 .x_label = std::string(metric_name(metric)) + " (ms)",
                 .y_label = "fraction of requests",
                 .log_x = std::isfinite(lo) && hi / lo > 100.0,
                 .y_min = 0.0,
                 .y_max = 1.0};
  return render_line_chart(spec, series);
}

std::string plot_throughput_over_time(const std::vector<RunResult>& runs, double bin_s) {
  double longest = 0.0;
  for (const RunResult& run : runs) longest = std::max(longest, run_end_s(run));
  if (bin_s <= 0.0) bin_s = std::max(0.1, longest / 60.0);
  std::vector<Series> series;
  for (const RunResult& run : runs) {
    const auto bins = static_cast<size_t>(std::ceil(run_end_s(run) / bin_s)) + 1;
    std::vector<double> tokens(bins, 0.0);
    for (const RequestRecord& r : run.records) {
      if (!r.success) continue;
      // Over HTTP a chunk may carry several tokens: spread the request's tokens over its chunks.
      const double per_time = r.token_times_s.empty() ? 0.0 : double(r.output_tokens) / double(r.token_times_s.size());
      for (double t : r.token_times_s) tokens[std::min(bins - 1, static_cast<size_t>(t / bin_s))] += per_time;
    }
    Series s{.name = run.label};
    for (size_t i = 0; i < bins; ++i) {
      s.x.push_back((double(i) + 0.5) * bin_s);
      s.y.push_back(tokens[i] / bin_s);
    }
    series.push_back(std::move(s));
  }
  return render_line_chart({.title = "Output throughput over time", .x_label = "time (s)",
                            .y_label = "output tokens/s"}, series);
}

std::string plot_queue_over_time(const std::vector<RunResult>& runs) {
  std::vector<Series> series;
  bool any_in_flight = false;
  for (const RunResult& run : runs) {
    Series s{.name = run.label, .steps = true};
    if (!run.steps.empty()) {
      for (const StepSample& st : run.steps) {
        s.x.push_back(st.t_s);
        s.y.push_back(double(st.num_waiting));
      }
    } else {
      any_in_flight = true;
      std::map<double, int> delta;
      for (const RequestRecord& r : run.records) {
        delta[r.arrival_s] += 1;
        if (std::isfinite(r.finish_s)) delta[r.finish_s] -= 1;
      }
      int level = 0;
      for (auto [t, d] : delta) {
        level += d;
        s.x.push_back(t);
        s.y.push_back(level);
      }
    }
    series.push_back(std::move(s));
  }
  const char* what = any_in_flight ? "requests waiting (in flight for HTTP runs)" : "requests waiting";
  return render_line_chart({.title = "Queue length over time", .x_label = "time (s)", .y_label = what}, series);
}

std::string plot_sweep(const std::string& knob, const std::vector<double>& values,
                       const std::vector<RunSummary>& summaries, const std::vector<SweepMetric>& metrics,
                       const std::string& y_label) {
  std::vector<Series> series;
  for (const SweepMetric& m : metrics) {
    Series s{.name = m.name, .markers = true};
    for (size_t i = 0; i < values.size() && i < summaries.size(); ++i) {
      s.x.push_back(values[i]);
      s.y.push_back(m.get(summaries[i]));
    }
    series.push_back(std::move(s));
  }
  return render_line_chart({.title = "Sweep of " + knob, .x_label = knob, .y_label = y_label}, series);
}

}  // namespace optimate::bench
