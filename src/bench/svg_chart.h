// A small SVG line-chart writer: axes with round-number ticks, optional log x, a legend, and
// one polyline per series. Plots are written by our own code so reports need no plotting
// library and look the same everywhere.
#pragma once

#include <limits>
#include <string>
#include <vector>

namespace optimate::bench {

struct Series {
  std::string name{};
  std::vector<double> x{};
  std::vector<double> y{};
  bool markers = false;  // a dot on each point (sweeps with few points)
  bool steps = false;    // hold each y until the next x (CDFs, queue length)
};

struct ChartSpec {
  std::string title{};
  std::string x_label{};
  std::string y_label{};
  bool log_x = false;
  // NaN: fit to the data (with zero included for y).
  double x_min = std::numeric_limits<double>::quiet_NaN();
  double x_max = std::numeric_limits<double>::quiet_NaN();
  double y_min = std::numeric_limits<double>::quiet_NaN();
  double y_max = std::numeric_limits<double>::quiet_NaN();
  int width_px = 760;
  int height_px = 440;
};

std::string render_line_chart(const ChartSpec& spec, const std::vector<Series>& series);

// Round tick positions from the last one at or below lo to the first one at or above hi:
// steps of 1, 2 or 5 times a power of ten, about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target);

}  // namespace optimate::bench
