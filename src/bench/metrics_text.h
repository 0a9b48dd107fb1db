// Reading a Prometheus text exposition (what a server's /metrics returns), one sample line at
// a time: the benchmark's view of an Optimate server's own figures.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <string_view>

namespace optimate::bench {

// One sample line, `name{k="v",...} value`: false for comments and malformed lines.
bool parse_metric_sample(std::string_view line, std::string& name, std::map<std::string, std::string>& labels,
                         double& value);

// Calls `on_sample(name, labels, value)` for every sample line of `text` with a finite value.
template <typename F>
void for_each_metric_sample(std::string_view text, F&& on_sample) {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (parse_metric_sample(line, name, labels, value) && std::isfinite(value))
      on_sample(name, labels, value);
  }
}

}  // namespace optimate::bench
