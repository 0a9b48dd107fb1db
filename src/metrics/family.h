// A metric family: one name, one HELP text, one label schema, and a child metric per distinct
// set of label values (`vllm:request_success{finished_reason="stop"}`).
//
// labels() takes a lock and may allocate; callers on a hot path look a child up once and keep
// the reference (children are never destroyed while the family lives).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "metrics/counter.h"
#include "metrics/gauge.h"
#include "metrics/histogram.h"

namespace optimate::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };
const char* metric_type_name(MetricType type);

class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names,
             MetricType type)
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)),
        type_(type) {}
  virtual ~FamilyBase() = default;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  MetricType type() const { return type_; }
  // The name on the wire: counters gain "_total", as in every Prometheus client.
  std::string exposed_name() const { return type_ == MetricType::kCounter ? name_ + "_total" : name_; }

  // Appends this family's sample lines (without HELP/TYPE).
  virtual void render_samples(std::string& out) const = 0;

 private:
  std::string name_;
  std::string help_;
  std::vector<std::string> label_names_;
  MetricType type_;
};

void render_child(std::string& out, const FamilyBase& family,
                  const std::vector<std::string>& values, const Counter& metric);
void render_child(std::string& out, const FamilyBase& family,
                  const std::vector<std::string>& values, const Gauge& metric);
void render_child(std::string& out, const FamilyBase& family,
                  const std::vector<std::string>& values, const Histogram& metric);

template <typename Metric>
class Family final : public FamilyBase {
 public:
  using Factory = std::function<std::unique_ptr<Metric>()>;

  Family(std::string name, std::string help, std::vector<std::string> label_names,
         MetricType type, Factory factory)
      : FamilyBase(std::move(name), std::move(help), std::move(label_names), type),
        factory_(std::move(factory)) {}

  // The child for these label values (in label_names() order), created on first use.
  Metric& labels(const std::vector<std::string>& values) {
    if (values.size() != label_names().size())
      fail(ErrorCode::kInvalidArgument, "metric {}: expected {} label values, got {}", name(),
           label_names().size(), values.size());
    std::lock_guard lock(mutex_);
    auto it = index_.find(values);
    if (it != index_.end()) return *it->second;
    children_.emplace_back(values, factory_());
    Metric* child = children_.back().second.get();
    index_.emplace(values, child);
    return *child;
  }
  // The single child of a family without labels.
  Metric& get() { return labels({}); }

  void render_samples(std::string& out) const override {
    std::lock_guard lock(mutex_);
    for (const auto& [values, metric] : children_) render_child(out, *this, values, *metric);
  }

 private:
  Factory factory_;
  mutable std::mutex mutex_;
  // Insertion order is the output order, so a scrape reads stably from one call to the next.
  std::vector<std::pair<std::vector<std::string>, std::unique_ptr<Metric>>> children_;
  std::map<std::vector<std::string>, Metric*> index_;
};

}  // namespace optimate::metrics
