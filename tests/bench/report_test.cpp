// The comparison table reads like the seed's section 4.3 and the plots are well-formed SVG.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/plots.h"
#include "bench/report_markdown.h"
#include "bench/svg_chart.h"

namespace optimate::bench {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

RunSummary row(const std::string& label, double tok_s, double mean_ttft, double p99_ttft) {
  RunSummary s;
  s.label = label;
  s.description = label + " config";
  s.output_throughput = tok_s;
  s.request_throughput = tok_s / 100.0;
  s.ttft_ms.mean = mean_ttft;
  s.ttft_ms.p99 = p99_ttft;
  s.tpot_ms.mean = 10.0;
  return s;
}

TEST(Markdown, DeltaIsRelativeToTheFirstRow) {
  EXPECT_EQ(with_delta(1450, 1250, 0, false), "1450 (+16.0%)");
  EXPECT_EQ(with_delta(430, 450, 0, false), "430 (-4.4%)");
  EXPECT_EQ(with_delta(1250, 1250, 0, true), "1250");
  EXPECT_EQ(with_delta(NAN, 1250, 0, false), "n/a");
  EXPECT_EQ(with_delta(5, 0, 0, false), "5");
}

TEST(Markdown, SeedTableHasOneRowPerConfigurationWithDeltas) {
  // The seed's example numbers (section 4.3).
  const std::string md = render_markdown(
      {row("Baseline", 1250, 150, 450), row("A", 1450, 165, 430), row("B", 1280, 145, 400),
       row("C", 1550, 155, 410)}, "mixed");
  EXPECT_NE(md.find("| Scenario | Configuration | Throughput (out tok/s) | Requests/s | Mean TTFT (ms) | P99 TTFT (ms) |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| Baseline | Baseline config | 1250 | 12.50 | 150.0 | 450.0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| A | A config | 1450 (+16.0%) | 14.50 (+16.0%) | 165.0 (+10.0%) | 430.0 (-4.4%) |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| C | C config | 1550 (+24.0%) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| Successful requests |"), std::string::npos);
}

TEST(Markdown, PriorityColumnsAppearForMixedPriorities) {
  RunSummary base = row("Baseline", 100, 50, 90);
  ClassSummary high{.name = "high", .priority = 3, .completed = 1};
  high.ttft_ms.p99 = 80;
  ClassSummary low{.name = "low", .priority = 1, .completed = 9};
  low.ttft_ms.max = 300;
  base.classes = {high, low};
  RunSummary b = base;
  b.label = "B";
  b.classes[0].ttft_ms.p99 = 20;
  const std::string md = render_markdown({base, b}, "mixed");
  EXPECT_NE(md.find("high P99 TTFT (ms) | low max wait (ms) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 20.0 (-75.0%) | 300 (+0.0%) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| B | high (3) | 1 |"), std::string::npos) << md;
}

TEST(Svg, NiceTicksAreRoundAndCoverTheRange) {
  EXPECT_EQ(nice_ticks(0, 97, 6), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  const std::vector<double> unit = nice_ticks(0, 1, 5);
  ASSERT_EQ(unit.size(), 6u);
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_NEAR(unit[i], 0.2 * double(i), 1e-12);
  EXPECT_EQ(nice_ticks(3, 28, 5), (std::vector<double>{0, 5, 10, 15, 20, 25, 30}));
}

TEST(Svg, ChartHasOnePolylinePerSeriesAndEscapedLegend) {
  const std::string svg = render_line_chart(
      {.title = "TTFT <ms>", .x_label = "x", .y_label = "y"},
      {{.name = "baseline & co", .x = {1, 2, 3}, .y = {1, 4, 9}}, {.name = "A", .x = {1, 2}, .y = {2, 3}, .markers = true}});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(count(svg, "<circle"), 2u);
  EXPECT_NE(svg.find("baseline &amp; co"), std::string::npos);
  EXPECT_NE(svg.find("TTFT &lt;ms&gt;"), std::string::npos);
}

TEST(Svg, LatencyCdfEndsAtOneForEveryConfiguration) {
  RunResult a{.label = "a"}, b{.label = "b"};
  for (int i = 1; i <= 20; ++i) {
    RequestRecord r{.arrival_s = 0.0, .first_token_s = 0.01 * i, .finish_s = 0.02 * i, .output_tokens = 1, .success = true};
    r.token_times_s = {r.first_token_s};
    a.records.push_back(r);
    r.first_token_s *= 2;
    b.records.push_back(r);
  }
  const std::string svg = plot_latency_cdf({a, b}, LatencyMetric::kTtft);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find(">a</text>"), std::string::npos);
  EXPECT_NE(svg.find(">b</text>"), std::string::npos);
}

}  // namespace
}  // namespace optimate::bench
