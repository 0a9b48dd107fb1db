// Where the serving engine's time goes (engine/step_profile.h), as counters that move by the
// engine's totals:
//
//   optimate:engine_step_phase_seconds_total{model_name, phase}   host wall time per phase:
//       between, schedule, forward, sample, update, observe
//   optimate:engine_steps_total{model_name, kind}                 kind: decode, prefill
//   optimate:device_busy_seconds_total{model_name, kind}          the device's busy time
//   optimate:device_stage_seconds_total{model_name, kind, stage}  on the steps timed by stage
//   optimate:device_staged_steps_total{model_name, kind}          how many steps were so timed
//
// A stage's share of every step of a kind is its seconds times steps / staged steps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "metrics/registry.h"

namespace optimate::metrics {

class StepProfileMetrics {
 public:
  StepProfileMetrics(Registry& registry, std::string model_name);

  // Totals since the engine started; every counter moves by the difference. One thread (the
  // engine's) calls it.
  void set(const std::map<std::string, double>& phase_seconds, const std::map<std::string, int64_t>& steps,
           const std::map<std::string, double>& device_seconds, const std::map<std::string, int64_t>& staged_steps,
           const std::map<std::pair<std::string, std::string>, double>& stage_seconds);

 private:
  std::string model_name_;
  Family<Counter>& phase_seconds_;
  Family<Counter>& steps_;
  Family<Counter>& device_seconds_;
  Family<Counter>& staged_steps_;
  Family<Counter>& stage_seconds_;
};

}  // namespace optimate::metrics
