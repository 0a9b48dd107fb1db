#include "bench/regression_gate.h"

#include <cmath>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "core/error.h"
#include "core/text_file.h"

namespace optimate::bench {
namespace {

double positive(const toml::node& node, const std::string& where) {
  const std::optional<double> v = node.value<double>();
  if (!v || !(*v > 0) || !std::isfinite(*v)) fail(ErrorCode::kInvalidFile, "{} must be a number > 0", where);
  return *v;
}

double tolerance(const toml::node& node, const std::string& where) {
  const std::optional<double> v = node.value<double>();
  if (!v || !(*v >= 0 && *v < 1)) fail(ErrorCode::kInvalidFile, "{} must be a fraction in [0, 1), e.g. 0.05", where);
  return *v;
}

}  // namespace

Gate parse_gate(const std::string& text, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    fail(ErrorCode::kInvalidFile, "{}: {}", path, e.description());
  }
  Gate gate;
  gate.path = path;
  double default_tolerance = 0.05;
  for (const auto& [key, node] : root) {
    const std::string k(key.str());
    if (k == "tolerance") default_tolerance = tolerance(node, path + ": tolerance");
    else if (k != "runs") fail(ErrorCode::kInvalidFile, "{}: unknown key '{}' (tolerance, runs)", path, k);
  }
  const toml::table* runs = root["runs"].as_table();
  if (!runs || runs->empty()) fail(ErrorCode::kInvalidFile, "{}: no [runs.LABEL] table", path);
  for (const auto& [label, node] : *runs) {
    const toml::table* t = node.as_table();
    const std::string where = fmt::format("{}: runs.{}", path, label.str());
    if (!t) fail(ErrorCode::kInvalidFile, "{} must be a table", where);
    GateFigure f;
    f.label = std::string(label.str());
    f.throughput_tolerance = f.ttft_tolerance = default_tolerance;
    for (const auto& [key, value] : *t) {
      const std::string k(key.str());
      const std::string at = where + "." + k;
      if (k == "output_throughput") f.output_throughput = positive(value, at);
      else if (k == "ttft_p99_ms") f.ttft_p99_ms = positive(value, at);
      else if (k == "throughput_tolerance") f.throughput_tolerance = tolerance(value, at);
      else if (k == "ttft_tolerance") f.ttft_tolerance = tolerance(value, at);
      else if (k == "source") f.source = value.value_or(std::string());
      else fail(ErrorCode::kInvalidFile, "{}: unknown key '{}' (output_throughput, ttft_p99_ms, throughput_tolerance, "
                "ttft_tolerance, source)", where, k);
    }
    if (!f.output_throughput && !f.ttft_p99_ms)
      fail(ErrorCode::kInvalidFile, "{} records neither output_throughput nor ttft_p99_ms", where);
    gate.figures.push_back(std::move(f));
  }
  return gate;
}

Gate load_gate(const std::string& path) {
  return parse_gate(read_regular_file(path, "--gate " + path, kMaxTextFileBytes), path);
}

bool GateResult::passed() const {
  if (!errors.empty() || checks.empty()) return false;
  for (const GateCheck& c : checks)
    if (!c.passed) return false;
  return true;
}

GateResult check_gate(const Gate& gate, const std::vector<RunSummary>& runs) {
  GateResult out;
  for (const GateFigure& f : gate.figures) {
    const RunSummary* run = nullptr;
    for (const RunSummary& r : runs)
      if (r.label == f.label) run = &r;
    if (!run) continue;  // a gate may record more runs than one benchmark makes (its variants)
    if (f.output_throughput) {
      const double limit = *f.output_throughput * (1.0 - f.throughput_tolerance);
      out.checks.push_back({f.label, "output tok/s", *f.output_throughput, run->output_throughput, limit,
                            run->output_throughput >= limit});
    }
    if (f.ttft_p99_ms) {
      const double measured = run->ttft_ms.count > 0 ? run->ttft_ms.p99 : NAN;
      const double limit = *f.ttft_p99_ms * (1.0 + f.ttft_tolerance);
      out.checks.push_back({f.label, "P99 TTFT (ms)", *f.ttft_p99_ms, measured, limit, measured <= limit});
    }
    if (run->failed > 0)
      out.errors.push_back(fmt::format("'{}': {} requests failed", f.label, run->failed));
  }
  for (const RunSummary& r : runs) {
    bool recorded = false;
    for (const GateFigure& f : gate.figures) recorded = recorded || f.label == r.label;
    if (!recorded) out.errors.push_back(fmt::format("run '{}' has no recorded figure in the gate", r.label));
  }
  return out;
}

std::string render_gate(const GateResult& result, const std::string& path) {
  std::string out = fmt::format("\n## Regression gate ({})\n\n| Run | Metric | Recorded | Limit | Measured | |\n"
                                "|---|---|---:|---:|---:|---|\n", path);
  for (const GateCheck& c : result.checks)
    out += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {} |\n", c.label, c.metric, c.recorded, c.limit,
                       c.measured, c.passed ? "pass" : "**FAIL**");
  for (const std::string& e : result.errors) out += "\nError: " + e + ".\n";
  out += result.passed() ? "\nGate passed.\n" : "\nGate FAILED.\n";
  return out;
}

std::string gate_toml(const std::vector<RunSummary>& runs, double tol, const std::string& source) {
  auto quoted = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) q += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
    return q + "\"";
  };
  std::string out = fmt::format("# Recorded by: {}\ntolerance = {}\n", source, tol);
  for (const RunSummary& r : runs) {
    out += fmt::format("\n[runs.{}]\noutput_throughput = {:.1f}\n", quoted(r.label), r.output_throughput);
    if (r.ttft_ms.count > 0) out += fmt::format("ttft_p99_ms = {:.1f}\n", r.ttft_ms.p99);
    out += fmt::format("source = {}\n", quoted(source));
  }
  return out;
}

}  // namespace optimate::bench
