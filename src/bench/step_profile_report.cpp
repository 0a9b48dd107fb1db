#include "bench/step_profile_report.h"

#include "bench/metrics_text.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <vector>

#include <fmt/format.h>

namespace optimate::bench {
namespace {

std::string label(const std::map<std::string, std::string>& labels, const char* key) {
  const auto it = labels.find(key);
  return it == labels.end() ? std::string() : it->second;
}

template <typename Map>
Map minus(const Map& after, const Map& before) {
  Map out;
  for (const auto& [k, v] : after) {
    const auto it = before.find(k);
    out[k] = it == before.end() ? v : v - it->second;
  }
  return out;
}

double total(const std::map<std::string, double>& m) {
  double t = 0;
  for (const auto& [k, v] : m) t += v;
  return t;
}

}  // namespace

StepProfile parse_step_profile(std::string_view text, bool& found) {
  StepProfile p;
  found = false;
  for_each_metric_sample(text, [&](const std::string& name, const std::map<std::string, std::string>& labels,
                                   double value) {
    if (name == "optimate:engine_step_phase_seconds_total") {
      p.phase_seconds[label(labels, "phase")] += value;
    } else if (name == "optimate:engine_steps_total") {
      p.steps[label(labels, "kind")] += static_cast<int64_t>(value);
    } else if (name == "optimate:device_busy_seconds_total") {
      p.device_seconds[label(labels, "kind")] += value;
    } else if (name == "optimate:device_staged_steps_total") {
      p.staged_steps[label(labels, "kind")] += static_cast<int64_t>(value);
    } else if (name == "optimate:device_stage_seconds_total") {
      p.stage_seconds[{label(labels, "kind"), label(labels, "stage")}] += value;
    } else {
      return;
    }
    found = true;
  });
  return p;
}

StepProfile step_profile_delta(const StepProfile& after, const StepProfile& before) {
  StepProfile d;
  d.phase_seconds = minus(after.phase_seconds, before.phase_seconds);
  d.steps = minus(after.steps, before.steps);
  d.device_seconds = minus(after.device_seconds, before.device_seconds);
  d.staged_steps = minus(after.staged_steps, before.staged_steps);
  d.stage_seconds = minus(after.stage_seconds, before.stage_seconds);
  return d;
}

std::string render_step_profile(const std::string& run_label, const StepProfile& p) {
  const double engine_s = total(p.phase_seconds);
  if (engine_s <= 0) return "";
  std::string out = fmt::format("\n#### {}: where the engine's time went\n\n", run_label);
  out += "| Host phase | Seconds | Share of the engine's time |\n|---|---:|---:|\n";
  for (const char* phase : {"between", "schedule", "forward", "sample", "update", "observe"}) {
    const auto it = p.phase_seconds.find(phase);
    if (it == p.phase_seconds.end()) continue;
    out += fmt::format("| {} | {:.2f} | {:.1f}% |\n", phase, it->second, 100.0 * it->second / engine_s);
  }
  const double device_s = total(p.device_seconds);
  if (device_s > 0)
    out += fmt::format("\nDevice busy {:.2f} s: {:.1f}% of the engine's time (the rest: host work between and "
                       "around steps, and launch gaps).\n",
                       device_s, 100.0 * device_s / engine_s);
  for (const auto& [kind, steps] : p.steps) {
    const auto staged = p.staged_steps.find(kind);
    const auto busy = p.device_seconds.find(kind);
    out += fmt::format("\n{} steps: {}", kind, steps);
    if (busy != p.device_seconds.end() && steps > 0)
      out += fmt::format(", device {:.2f} ms per step", 1e3 * busy->second / static_cast<double>(steps));
    if (staged == p.staged_steps.end() || staged->second <= 0) {
      out += ".\n";
      continue;
    }
    out += fmt::format("; {} timed by stage (eager, with an event per stage):\n\n", staged->second);
    out += "| Stage | ms per step | Share of the timed steps |\n|---|---:|---:|\n";
    std::vector<std::pair<std::string, double>> stages;
    double staged_total = 0;
    for (const auto& [key, seconds] : p.stage_seconds)
      if (key.first == kind) {
        stages.emplace_back(key.second, seconds);
        staged_total += seconds;
      }
    for (const auto& [stage, seconds] : stages)
      out += fmt::format("| {} | {:.3f} | {:.1f}% |\n", stage, 1e3 * seconds / static_cast<double>(staged->second),
                         staged_total > 0 ? 100.0 * seconds / staged_total : 0.0);
  }
  return out;
}

nlohmann::json step_profile_json(const StepProfile& p) {
  nlohmann::json stages = nlohmann::json::object();
  for (const auto& [key, seconds] : p.stage_seconds) stages[key.first][key.second] = seconds;
  return {{"phase_seconds", p.phase_seconds}, {"steps", p.steps},           {"device_seconds", p.device_seconds},
          {"staged_steps", p.staged_steps},   {"stage_seconds", stages}};
}

}  // namespace optimate::bench
