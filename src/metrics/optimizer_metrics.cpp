#include "metrics/optimizer_metrics.h"

namespace optimate::metrics {

OptimizerMetrics::OptimizerMetrics(Registry& r, std::string model_name)
    : model_name_(std::move(model_name)),
      seconds_(r.counter("optimate:optimizer_seconds", "Seconds spent inside each optimizer's policies.",
                         {"model_name", "optimizer"})),
      fallbacks_(r.counter("optimate:optimizer_fallbacks",
                           "Optimizers disabled automatically, the engine continuing on the baseline.",
                           {"model_name", "optimizer", "reason"})),
      config_version_(r.gauge("optimate:config_version", "Version of the active configuration (1 at start, "
                              "one more per applied reload).", {"model_name"})
                          .labels({model_name_})),
      reloads_(r.counter("optimate:config_reloads", "Configuration reloads by result.", {"model_name", "result"})) {
  config_version_.set(1);
}

void OptimizerMetrics::set_seconds(const std::map<std::string, double>& seconds_by_optimizer) {
  for (const auto& [optimizer, total] : seconds_by_optimizer) {
    Counter& c = seconds_.labels({model_name_, optimizer});
    c.inc(total - c.value());
  }
}

void OptimizerMetrics::set_fallbacks(const std::map<std::pair<std::string, std::string>, int64_t>& counts) {
  for (const auto& [key, total] : counts) {
    Counter& c = fallbacks_.labels({model_name_, key.first, key.second});
    c.inc(static_cast<double>(total) - c.value());
  }
}

void OptimizerMetrics::set_config_version(int64_t version) { config_version_.set(static_cast<double>(version)); }

void OptimizerMetrics::record_config_reload(const std::string& result) {
  reloads_.labels({model_name_, result}).inc();
}

}  // namespace optimate::metrics
