// The optimizers' own series: time spent inside each optimizer's policies (its overhead, the
// seed's section 5.4), fallbacks to the baseline by reason, and the active configuration's
// version and reloads.
//
//   optimate:optimizer_seconds_total{model_name, optimizer}
//   optimate:optimizer_fallbacks_total{model_name, optimizer, reason}
//   optimate:config_version{model_name}
//   optimate:config_reloads_total{model_name, result}   result: applied, unchanged, invalid
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "metrics/registry.h"

namespace optimate::metrics {

class OptimizerMetrics {
 public:
  OptimizerMetrics(Registry& registry, std::string model_name);

  // Totals since the engine started (EngineStats): each counter moves by the difference.
  // Called from one thread (the engine's).
  void set_seconds(const std::map<std::string, double>& seconds_by_optimizer);
  void set_fallbacks(const std::map<std::pair<std::string, std::string>, int64_t>& counts);
  void set_config_version(int64_t version);
  void record_config_reload(const std::string& result);

 private:
  std::string model_name_;
  Family<Counter>& seconds_;
  Family<Counter>& fallbacks_;
  Gauge& config_version_;
  Family<Counter>& reloads_;
};

}  // namespace optimate::metrics
