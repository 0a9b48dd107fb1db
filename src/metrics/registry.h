// The set of metric families a process exports, rendered as Prometheus text format 0.0.4.
//
// Families are registered once at start-up (registering a name twice is an error, as in every
// Prometheus client); the returned references stay valid for the registry's lifetime.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "metrics/family.h"

namespace optimate::metrics {

class Registry {
 public:
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

  // A counter's name is given without "_total" (a trailing "_total" is dropped, as the Python
  // client does); the exposition adds it.
  Family<Counter>& counter(std::string name, std::string help,
                           std::vector<std::string> label_names = {});
  Family<Gauge>& gauge(std::string name, std::string help,
                       std::vector<std::string> label_names = {});
  Family<Histogram>& histogram(std::string name, std::string help, std::vector<double> bounds,
                               std::vector<std::string> label_names = {});

  // Runs at the start of every render(): refreshes gauges that are cheaper to read at scrape
  // time than to push on every change (queue lengths, KV usage).
  void add_collect_hook(std::function<void()> hook);

  std::string render() const;

 private:
  void check_new(const std::string& name, const std::vector<std::string>& label_names,
                 MetricType type) const;

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<FamilyBase>> families_;
  std::vector<std::function<void()>> hooks_;
};

}  // namespace optimate::metrics
