// The regression gate: recorded figures read from TOML, a run worse than them beyond the
// tolerance fails, and a gate never passes by checking nothing.
#include <gtest/gtest.h>

#include "bench/regression_gate.h"
#include "core/error.h"

namespace optimate::bench {
namespace {

RunSummary run(const std::string& label, double tok_s, double p99_ttft_ms) {
  RunSummary s;
  s.label = label;
  s.output_throughput = tok_s;
  s.ttft_ms.count = 100;
  s.ttft_ms.p99 = p99_ttft_ms;
  return s;
}

const char* kGate = R"(
tolerance = 0.05
[runs.h200-throughput]
output_throughput = 15792
ttft_p99_ms = 11000
source = "benchmarks.md"
[runs."http://127.0.0.1:8125"]
output_throughput = 5214
ttft_tolerance = 0.2
ttft_p99_ms = 14000
)";

TEST(RegressionGate, PassesWithinTheToleranceAndFailsBeyondIt) {
  const Gate gate = parse_gate(kGate, "gate.toml");
  ASSERT_EQ(gate.figures.size(), 2u);
  EXPECT_DOUBLE_EQ(gate.figures[1].ttft_tolerance, 0.2);
  EXPECT_DOUBLE_EQ(gate.figures[1].throughput_tolerance, 0.05);
  // 4% slower and 4% later: within 5%.
  const GateResult ok = check_gate(gate, {run("h200-throughput", 15160, 11440), run("http://127.0.0.1:8125", 5214, 16000)});
  EXPECT_TRUE(ok.passed()) << render_gate(ok, "gate.toml");
  EXPECT_EQ(ok.checks.size(), 4u);
  // 6% less throughput fails; so does a P99 TTFT 6% higher.
  const GateResult slow = check_gate(gate, {run("h200-throughput", 14840, 11000), run("http://127.0.0.1:8125", 5214, 14000)});
  EXPECT_FALSE(slow.passed());
  EXPECT_FALSE(slow.checks[0].passed);
  EXPECT_TRUE(slow.checks[1].passed);
  const std::string table = render_gate(slow, "gate.toml");
  EXPECT_NE(table.find("| h200-throughput | output tok/s | 15792.0 | 15002.4 | 14840.0 | **FAIL** |"), std::string::npos)
      << table;
  EXPECT_NE(table.find("Gate FAILED."), std::string::npos);
  const GateResult late = check_gate(gate, {run("h200-throughput", 16000, 11660), run("http://127.0.0.1:8125", 5214, 14000)});
  EXPECT_FALSE(late.passed());
  // Faster and sooner than recorded always passes.
  EXPECT_TRUE(check_gate(gate, {run("h200-throughput", 20000, 5000), run("http://127.0.0.1:8125", 6000, 100)}).passed());
}

TEST(RegressionGate, EveryRunNeedsARecordedFigure) {
  const Gate gate = parse_gate(kGate, "gate.toml");
  // One variant of the two the gate records: its figures are checked, the other is not run.
  const GateResult one = check_gate(gate, {run("h200-throughput", 16000, 10000)});
  EXPECT_TRUE(one.passed()) << render_gate(one, "gate.toml");
  EXPECT_EQ(one.checks.size(), 2u);
  // A run the gate does not record fails: the gate never passes by checking nothing.
  const GateResult none = check_gate(gate, {run("unrecorded", 1, 1)});
  EXPECT_FALSE(none.passed());
  ASSERT_EQ(none.errors.size(), 1u);
  EXPECT_NE(none.errors[0].find("no recorded figure"), std::string::npos);
  const GateResult extra = check_gate(gate, {run("h200-throughput", 16000, 10000), run("http://127.0.0.1:8125", 6000, 100),
                                             run("unrecorded", 1, 1)});
  EXPECT_FALSE(extra.passed());
  RunSummary failed = run("h200-throughput", 16000, 10000);
  failed.failed = 3;
  EXPECT_FALSE(check_gate(gate, {failed, run("http://127.0.0.1:8125", 6000, 100)}).passed());
}

TEST(RegressionGate, MalformedGatesNameTheKey) {
  for (const auto& [text, word] : std::vector<std::pair<std::string, std::string>>{
           {"tolerance = 0.1", "no [runs.LABEL]"},
           {"tolerance = 1.5\n[runs.a]\noutput_throughput = 1", "tolerance"},
           {"[runs.a]\noutput_throughput = -3", "runs.a.output_throughput"},
           {"[runs.a]\nthroughput = 3", "unknown key 'throughput'"},
           {"[runs.a]\nsource = \"x\"", "neither"},
           {"speed = 1\n[runs.a]\noutput_throughput = 1", "unknown key 'speed'"},
           {"[runs.a\n", "gate.toml"}}) {
    try {
      parse_gate(text, "gate.toml");
      ADD_FAILURE() << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  }
}

TEST(RegressionGate, RecordedFiguresGateTheRunsTheyCameFrom) {
  const std::vector<RunSummary> runs = {run("baseline", 5000, 900), run("http://h:1 \"b\"", 4000, 1200)};
  const Gate gate = parse_gate(gate_toml(runs, 0.1, "optimate bench --workload w.toml"), "recorded.toml");
  ASSERT_EQ(gate.figures.size(), 2u);
  EXPECT_EQ(gate.figures[1].label, "http://h:1 \"b\"");
  EXPECT_DOUBLE_EQ(gate.figures[0].throughput_tolerance, 0.1);
  EXPECT_TRUE(check_gate(gate, runs).passed());
  EXPECT_FALSE(check_gate(gate, {run("baseline", 4000, 900), runs[1]}).passed());
}

}  // namespace
}  // namespace optimate::bench
