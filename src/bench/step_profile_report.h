// The engine's own account of a run (engine/step_profile.h): read from a server's /metrics
// before and after the run (the optimate:engine_step_* and optimate:device_* series), or taken
// from an in-process engine, and rendered as the report's "where the time went" tables.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/step_profile.h"

namespace optimate::bench {

// The step-profile series of a Prometheus text exposition, summed over model names; false in
// `found` when it has none of them (a server other than Optimate's).
StepProfile parse_step_profile(std::string_view metrics_text, bool& found);

// What happened between two snapshots of the totals.
StepProfile step_profile_delta(const StepProfile& after, const StepProfile& before);

// Markdown: the host's phases, the device's busy time per step kind, and the device's time per
// stage per step timed by stage (eager steps: a graph replay of the same step takes less).
std::string render_step_profile(const std::string& label, const StepProfile& profile);

nlohmann::json step_profile_json(const StepProfile& profile);

}  // namespace optimate::bench
