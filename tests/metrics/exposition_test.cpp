// The registry's text output must match, byte for byte, what the official Prometheus Python
// client writes for the same metrics (tests/scripts/gen_prometheus_fixture.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "metrics/registry.h"

namespace optimate::metrics {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "missing fixture " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Exposition, MatchesPythonClientByteForByte) {
  Registry r;
  auto& c = r.counter("demo:requests", "Requests served.\nSecond line with a \\ backslash.",
                      {"model_name", "finished_reason"});
  c.labels({"m\"x\\y\nz", "stop"}).inc(3);
  c.labels({"m", "length"}).inc(0.5);

  auto& g = r.gauge("demo:values", "Assorted gauge values.", {"case"});
  const double inf = std::numeric_limits<double>::infinity();
  const std::pair<const char*, double> cases[] = {
      {"zero", 0.0},     {"int", 7.0},   {"small", 1e-05},  {"tenth", 0.1},
      {"big", 1234567.0}, {"neg", -2.5},  {"inf", inf},      {"ninf", -inf},
      {"nan", std::nan("")}, {"third", 1.0 / 3.0}, {"mid", 123456.0}};
  for (const auto& [name, value] : cases) g.labels({name}).set(value);

  r.gauge("demo:plain", "A gauge without labels.").get().set(42);

  auto& h = r.histogram("demo:ttft_seconds", "Time to first token.",
                        {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                         2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0},
                        {"model_name"});
  for (double v : {0.0005, 0.001, 0.3, 3000.0, 0.07}) h.labels({"m"}).observe(v);

  auto& sizes = r.histogram("demo:sizes", "Sizes, no labels.", {1, 2, 5}).get();
  for (double v : {1, 1, 3, 9}) sizes.observe(v);

  EXPECT_EQ(r.render(), read_file(OPTIMATE_TEST_DATA_DIR "/metrics/exposition.txt"));
}

}  // namespace
}  // namespace optimate::metrics
