#include "metrics/registry.h"

#include "core/error.h"
#include "metrics/prometheus_text.h"

namespace optimate::metrics {

namespace {

std::vector<std::string> names_on_wire(const std::string& name, MetricType type) {
  switch (type) {
    case MetricType::kCounter: return {name + "_total", name + "_created"};
    case MetricType::kGauge: return {name};
    case MetricType::kHistogram:
      return {name, name + "_bucket", name + "_count", name + "_sum", name + "_created"};
  }
  return {name};
}

std::string strip_total(std::string name) {
  constexpr std::string_view kSuffix = "_total";
  if (name.size() > kSuffix.size() && name.ends_with(kSuffix)) name.resize(name.size() - kSuffix.size());
  return name;
}

}  // namespace

void Registry::check_new(const std::string& name, const std::vector<std::string>& label_names,
                         MetricType type) const {
  if (!is_valid_metric_name(name))
    fail(ErrorCode::kInvalidArgument, "metric name '{}' is not a valid Prometheus name", name);
  for (const auto& label : label_names) {
    if (!is_valid_label_name(label))
      fail(ErrorCode::kInvalidArgument, "metric {}: label name '{}' is not valid", name, label);
    if (type == MetricType::kHistogram && label == "le")
      fail(ErrorCode::kInvalidArgument, "metric {}: histograms reserve the label 'le'", name);
  }
  // Two families must not produce the same series name (a counter "x" and a gauge "x_total").
  auto mine = names_on_wire(name, type);
  for (const auto& family : families_)
    for (const auto& theirs : names_on_wire(family->name(), family->type()))
      for (const auto& m : mine)
        if (m == theirs)
          fail(ErrorCode::kInvalidArgument, "metric {} is already registered (as {})", name,
               family->name());
}

Family<Counter>& Registry::counter(std::string name, std::string help,
                                   std::vector<std::string> label_names) {
  name = strip_total(std::move(name));
  std::lock_guard lock(mutex_);
  check_new(name, label_names, MetricType::kCounter);
  auto family = std::make_unique<Family<Counter>>(std::move(name), std::move(help),
                                                  std::move(label_names), MetricType::kCounter,
                                                  [] { return std::make_unique<Counter>(); });
  auto& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

Family<Gauge>& Registry::gauge(std::string name, std::string help,
                               std::vector<std::string> label_names) {
  std::lock_guard lock(mutex_);
  check_new(name, label_names, MetricType::kGauge);
  auto family = std::make_unique<Family<Gauge>>(std::move(name), std::move(help),
                                                std::move(label_names), MetricType::kGauge,
                                                [] { return std::make_unique<Gauge>(); });
  auto& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

Family<Histogram>& Registry::histogram(std::string name, std::string help,
                                       std::vector<double> bounds,
                                       std::vector<std::string> label_names) {
  std::lock_guard lock(mutex_);
  check_new(name, label_names, MetricType::kHistogram);
  check_bucket_bounds(bounds, name.c_str());
  auto family = std::make_unique<Family<Histogram>>(
      std::move(name), std::move(help), std::move(label_names), MetricType::kHistogram,
      [bounds = std::move(bounds)] { return std::make_unique<Histogram>(bounds); });
  auto& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

void Registry::add_collect_hook(std::function<void()> hook) {
  std::lock_guard lock(mutex_);
  hooks_.push_back(std::move(hook));
}

std::string Registry::render() const {
  std::lock_guard lock(mutex_);
  for (const auto& hook : hooks_) hook();
  std::string out;
  out.reserve(16 * 1024);
  for (const auto& family : families_) {
    const std::string exposed = family->exposed_name();
    out += "# HELP ";
    out += exposed;
    out += ' ';
    append_escaped_help(out, family->help());
    out += "\n# TYPE ";
    out += exposed;
    out += ' ';
    out += metric_type_name(family->type());
    out += '\n';
    family->render_samples(out);
  }
  return out;
}

}  // namespace optimate::metrics
