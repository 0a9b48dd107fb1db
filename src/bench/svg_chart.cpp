#include "bench/svg_chart.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace optimate::bench {
namespace {

// Okabe-Ito: distinguishable with the common colour-vision deficiencies.
constexpr const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                    "#E69F00", "#56B4E9", "#000000", "#F0E442"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string tick_label(double v) {
  if (v == 0.0) return "0";
  const double a = std::abs(v);
  if (a >= 1e6 || a < 1e-3) return fmt::format("{:.0e}", v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  std::string s = fmt::format("{:.3f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  // Multiples of the step (not repeated additions), so ticks carry no accumulated error.
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  for (double k = first; k <= last; k += 1.0) ticks.push_back(k * step + 0.0);  // + 0.0: no "-0"
  return ticks;
}

std::string render_line_chart(const ChartSpec& spec, const std::vector<Series>& series) {
  const double left = 72, right = 24, top = 40, bottom = 56;
  const double w = spec.width_px, h = spec.height_px;
  const double pw = w - left - right, ph = h - top - bottom;

  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = 0.0, y_hi = -INFINITY;
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (spec.log_x && s.x[i] <= 0)) continue;
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
    }
  if (!std::isfinite(x_lo)) x_lo = spec.log_x ? 1.0 : 0.0, x_hi = x_lo + 1.0, y_hi = 1.0;
  if (!std::isnan(spec.x_min)) x_lo = spec.x_min;
  if (!std::isnan(spec.x_max)) x_hi = spec.x_max;
  if (!std::isnan(spec.y_min)) y_lo = spec.y_min;
  if (!std::isnan(spec.y_max)) y_hi = spec.y_max;

  std::vector<double> x_ticks;
  if (spec.log_x) {
    x_lo = std::pow(10.0, std::floor(std::log10(x_lo)));
    x_hi = std::pow(10.0, std::ceil(std::log10(std::max(x_hi, x_lo * 10.0))));
    for (double t = x_lo; t <= x_hi * 1.0001; t *= 10.0) x_ticks.push_back(t);
  } else {
    if (!(x_hi > x_lo)) x_hi = x_lo + 1.0;
    x_ticks = nice_ticks(x_lo, x_hi, 8);
    x_lo = std::min(x_lo, x_ticks.front());
    x_hi = std::max(x_hi, x_ticks.back());
  }
  if (!(y_hi > y_lo)) y_hi = y_lo + 1.0;
  std::vector<double> y_ticks = nice_ticks(y_lo, y_hi, 6);
  y_lo = std::min(y_lo, y_ticks.front());
  y_hi = std::max(y_hi, y_ticks.back());

  auto px = [&](double x) {
    const double f = spec.log_x ? (std::log10(x) - std::log10(x_lo)) / (std::log10(x_hi) - std::log10(x_lo))
                                : (x - x_lo) / (x_hi - x_lo);
    return left + f * pw;
  };
  auto py = [&](double y) { return top + ph - (y - y_lo) / (y_hi - y_lo) * ph; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">{3}</text>\n",
      spec.width_px, spec.height_px, w / 2, escape(spec.title));
  for (double t : x_ticks) {
    const double x = px(t);
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e5e5e5\"/>\n"
                       "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
                       x, top, top + ph, top + ph + 18, tick_label(t));
  }
  for (double t : y_ticks) {
    const double y = py(t);
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e5e5e5\"/>\n"
                       "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
                       left, y, left + pw, left - 8, y + 4, tick_label(t));
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n",
                     left, top, pw, ph);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", left + pw / 2,
                     h - 14, escape(spec.x_label));
  svg += fmt::format("<text transform=\"translate(18,{:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                     top + ph / 2, escape(spec.y_label));

  svg += fmt::format("<g clip-path=\"url(#plot)\">\n<clipPath id=\"plot\"><rect x=\"{}\" y=\"{}\" width=\"{}\" "
                     "height=\"{}\"/></clipPath>\n", left, top, pw, ph);
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    const char* color = kPalette[k % std::size(kPalette)];
    std::string points;
    double prev_y = NAN;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (spec.log_x && s.x[i] <= 0)) continue;
      if (s.steps && std::isfinite(prev_y)) points += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(prev_y));
      points += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(s.y[i]));
      prev_y = s.y[i];
    }
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" points=\"{}\"/>\n", color, points);
    if (s.markers)
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        if (std::isfinite(s.x[i]) && std::isfinite(s.y[i]))
          svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>\n", px(s.x[i]), py(s.y[i]), color);
  }
  svg += "</g>\n";

  // Legend on a translucent box in whichever top corner hides fewer data points.
  size_t longest = 0;
  for (const Series& s : series) longest = std::max(longest, s.name.size());
  const double box_w = 36 + 7.0 * longest, box_h = 8 + 18.0 * series.size();
  auto points_under = [&](double bx) {
    int n = 0;
    for (const Series& s : series)
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (spec.log_x && s.x[i] <= 0)) continue;
        const double x = px(s.x[i]), y = py(s.y[i]);
        n += x >= bx && x <= bx + box_w && y >= top + 10 && y <= top + 10 + box_h;
      }
    return n;
  };
  const double right_x = left + pw - 10 - box_w;
  const double lx = points_under(right_x) < points_under(left + 10) ? right_x : left + 10;
  const double ly = top + 10;
  if (!series.empty())
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.0f}\" height=\"{}\" fill=\"white\" fill-opacity=\"0.85\" "
                       "stroke=\"#ccc\"/>\n", lx, ly, box_w, box_h);
  for (size_t k = 0; k < series.size(); ++k) {
    const double y = ly + 16 + 18.0 * k;
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2.5\"/>\n"
                       "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
                       lx + 6, y - 4, lx + 24, y - 4, kPalette[k % std::size(kPalette)], lx + 30, y,
                       escape(series[k].name));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace optimate::bench
