#include "metrics/family.h"

#include "metrics/prometheus_text.h"

namespace optimate::metrics {

const char* metric_type_name(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

namespace {

void sample_line(std::string& out, std::string_view name, const FamilyBase& family,
                 const std::vector<std::string>& values, double value,
                 std::string_view extra_name = {}, std::string_view extra_value = {}) {
  out += name;
  append_labels(out, family.label_names(), values, extra_name, extra_value);
  out += ' ';
  append_value(out, value);
  out += '\n';
}

}  // namespace

void render_child(std::string& out, const FamilyBase& family,
                  const std::vector<std::string>& values, const Counter& metric) {
  sample_line(out, family.exposed_name(), family, values, metric.value());
}

void render_child(std::string& out, const FamilyBase& family,
                  const std::vector<std::string>& values, const Gauge& metric) {
  sample_line(out, family.name(), family, values, metric.value());
}

void render_child(std::string& out, const FamilyBase& family,
                  const std::vector<std::string>& values, const Histogram& metric) {
  Histogram::Snapshot snap = metric.snapshot();
  const std::string bucket_name = family.name() + "_bucket";
  const auto& bounds = metric.upper_bounds();
  for (size_t i = 0; i < bounds.size(); ++i)
    sample_line(out, bucket_name, family, values, static_cast<double>(snap.cumulative_counts[i]),
                "le", format_value(bounds[i]));
  sample_line(out, bucket_name, family, values, static_cast<double>(snap.count()), "le", "+Inf");
  sample_line(out, family.name() + "_count", family, values, static_cast<double>(snap.count()));
  sample_line(out, family.name() + "_sum", family, values, snap.sum);
}

}  // namespace optimate::metrics
