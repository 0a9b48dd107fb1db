#include "bench/workload_toml.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <string_view>
#include <vector>

#include <fmt/ranges.h>

#include <toml++/toml.h>

#include "bench/toml_override.h"
#include "core/error.h"
#include "core/text_file.h"

namespace optimate::bench {
namespace {

// Reads keys of one table, remembering which were read so leftovers (typos) are reported.
class TableReader {
 public:
  TableReader(const toml::table& table, std::string path, const std::string& source)
      : table_(table), path_(std::move(path)), source_(source) {}

  template <typename T>
  void read(const char* key, T& out) {
    const toml::node* node = table_.get(key);
    seen_.insert(key);
    if (!node) return;
    if constexpr (std::is_same_v<T, std::string>) {
      if (auto v = node->value<std::string>()) { out = *v; return; }
    } else if constexpr (std::is_same_v<T, bool>) {
      if (auto v = node->value<bool>()) { out = *v; return; }
    } else if constexpr (std::is_floating_point_v<T>) {
      if (auto v = node->value<double>()) { out = static_cast<T>(*v); return; }
    } else {
      if (node->is_integer()) { out = static_cast<T>(node->as_integer()->get()); return; }
    }
    fail(ErrorCode::kInvalidFile, "{}: {}.{} has the wrong type", source_, path_, key);
  }

  const toml::table* table(const char* key) {
    seen_.insert(key);
    const toml::node* node = table_.get(key);
    if (!node) return nullptr;
    if (!node->is_table()) fail(ErrorCode::kInvalidFile, "{}: {}.{} must be a table", source_, path_, key);
    return node->as_table();
  }

  const toml::array* array(const char* key) {
    seen_.insert(key);
    const toml::node* node = table_.get(key);
    if (!node) return nullptr;
    if (!node->is_array()) fail(ErrorCode::kInvalidFile, "{}: {}.{} must be an array", source_, path_, key);
    return node->as_array();
  }

  void reject_unknown() const {
    for (const auto& [key, node] : table_)
      if (!seen_.count(std::string(key.str())))
        fail(ErrorCode::kInvalidFile, "{}: unknown key {}.{}", source_, path_, key.str());
  }

 private:
  const toml::table& table_;
  std::string path_;
  const std::string& source_;
  std::set<std::string> seen_;
};

ArrivalKind arrival_kind(const std::string& name, const std::string& source) {
  for (ArrivalKind k : {ArrivalKind::kOffline, ArrivalKind::kConstant, ArrivalKind::kPoisson,
                        ArrivalKind::kGamma, ArrivalKind::kBurst, ArrivalKind::kClosedLoop,
                        ArrivalKind::kTrace, ArrivalKind::kPhases})
    if (name == arrival_kind_name(k)) return k;
  fail(ErrorCode::kInvalidFile,
       "{}: workload.arrival.kind \"{}\" is not one of offline, constant, poisson, gamma, burst, "
       "closed, trace, phases", source, name);
}

// A key the arrival kind does not read would be silently ignored (a --sweep over it would
// measure one load under several labels): refused, naming what the kind takes.
void check_arrival_keys(const toml::table& arrival, ArrivalKind kind, const std::string& source) {
  std::vector<std::string_view> takes;
  switch (kind) {
    case ArrivalKind::kConstant:
    case ArrivalKind::kPoisson: takes = {"rate"}; break;
    case ArrivalKind::kGamma: takes = {"rate", "burstiness"}; break;
    case ArrivalKind::kBurst: takes = {"on_s", "off_s", "on_rate", "off_rate"}; break;
    case ArrivalKind::kClosedLoop: takes = {"concurrency"}; break;
    case ArrivalKind::kPhases: takes = {"phases"}; break;
    case ArrivalKind::kOffline:
    case ArrivalKind::kTrace: break;
  }
  for (const auto& [key, node] : arrival) {
    const std::string_view k = key.str();
    if (k == "kind" || std::find(takes.begin(), takes.end(), k) != takes.end()) continue;
    fail(ErrorCode::kInvalidFile, "{}: workload.arrival.{} does not apply to kind \"{}\" (it takes {})", source, k,
         arrival_kind_name(kind), takes.empty() ? std::string("no other key") : fmt::format("{}", fmt::join(takes, ", ")));
  }
}

LengthSpec read_length(const toml::table* t, const char* path, LengthSpec spec, const std::string& source) {
  if (!t) return spec;
  TableReader r(*t, path, source);
  std::string kind = "fixed";
  r.read("kind", kind);
  if (kind == "fixed") spec.kind = LengthKind::kFixed;
  else if (kind == "uniform") spec.kind = LengthKind::kUniform;
  else if (kind == "lognormal") spec.kind = LengthKind::kLognormal;
  else fail(ErrorCode::kInvalidFile, "{}: {}.kind \"{}\" is not fixed, uniform or lognormal", source, path, kind);
  r.read("value", spec.value);
  r.read("min", spec.min);
  r.read("max", spec.max);
  r.read("mean", spec.mean);
  r.read("sigma", spec.sigma);
  r.reject_unknown();
  return spec;
}

WorkloadSpec read_spec(const toml::table& doc, const std::string& source) {
  const toml::table* root = &doc;
  if (const toml::node* w = doc.get("workload")) {
    if (!w->is_table()) fail(ErrorCode::kInvalidFile, "{}: workload must be a table", source);
    root = w->as_table();
  }
  WorkloadSpec spec;
  TableReader r(*root, "workload", source);
  r.read("name", spec.name);
  int64_t seed = 0;
  r.read("seed", seed);
  spec.seed = static_cast<uint64_t>(seed);
  r.read("num_requests", spec.num_requests);
  r.read("ignore_eos", spec.ignore_eos);
  if (const toml::array* range = r.array("token_id_range")) {
    if (range->size() != 2 || !(*range)[0].is_integer() || !(*range)[1].is_integer())
      fail(ErrorCode::kInvalidFile, "{}: workload.token_id_range must be [min, max]", source);
    spec.token_id_min = (*range)[0].as_integer()->get();
    spec.token_id_max = (*range)[1].as_integer()->get();
  }
  if (const toml::table* a = r.table("arrival")) {
    TableReader ar(*a, "workload.arrival", source);
    std::string kind = "poisson";
    ar.read("kind", kind);
    spec.arrival.kind = arrival_kind(kind, source);
    ar.read("rate", spec.arrival.rate_per_s);
    ar.read("burstiness", spec.arrival.burstiness);
    ar.read("on_s", spec.arrival.on_s);
    ar.read("off_s", spec.arrival.off_s);
    ar.read("on_rate", spec.arrival.on_rate_per_s);
    ar.read("off_rate", spec.arrival.off_rate_per_s);
    ar.read("concurrency", spec.arrival.concurrency);
    if (const toml::array* phases = ar.array("phases")) {
      for (const toml::node& node : *phases) {
        if (!node.is_table()) fail(ErrorCode::kInvalidFile, "{}: workload.arrival.phases entries must be tables", source);
        TableReader pr(*node.as_table(), "workload.arrival.phases", source);
        ArrivalPhase phase;
        pr.read("duration_s", phase.duration_s);
        pr.read("rate", phase.rate_per_s);
        pr.reject_unknown();
        spec.arrival.phases.push_back(phase);
      }
    }
    ar.reject_unknown();
    check_arrival_keys(*a, spec.arrival.kind, source);
  }
  spec.prompt = read_length(r.table("prompt"), "workload.prompt", spec.prompt, source);
  spec.output = read_length(r.table("output"), "workload.output", spec.output, source);
  if (const toml::array* classes = r.array("priorities")) {
    for (const toml::node& node : *classes) {
      if (!node.is_table()) fail(ErrorCode::kInvalidFile, "{}: workload.priorities entries must be tables", source);
      TableReader cr(*node.as_table(), "workload.priorities", source);
      PriorityClass c;
      cr.read("priority", c.priority);
      c.name = fmt::format("p{}", c.priority);
      cr.read("name", c.name);
      cr.read("weight", c.weight);
      cr.reject_unknown();
      spec.priorities.push_back(c);
    }
  }
  if (const toml::table* p = r.table("prefix")) {
    TableReader pr(*p, "workload.prefix", source);
    pr.read("groups", spec.prefix.num_groups);
    pr.read("length", spec.prefix.length);
    pr.read("fraction", spec.prefix.fraction);
    pr.reject_unknown();
  }
  if (const toml::table* c = r.table("conversation")) {
    TableReader cr(*c, "workload.conversation", source);
    ConversationSpec conv;
    conv.turns = read_length(cr.table("turns"), "workload.conversation.turns", conv.turns, source);
    cr.read("think_s", conv.think_s);
    std::string think = "exponential";
    cr.read("think", think);
    if (think == "fixed") conv.think_fixed = true;
    else if (think != "exponential")
      fail(ErrorCode::kInvalidFile, "{}: workload.conversation.think \"{}\" is not exponential or fixed", source, think);
    cr.reject_unknown();
    spec.conversation = conv;
  }
  if (const toml::table* t = r.table("trace")) {
    TableReader tr(*t, "workload.trace", source);
    TraceSpec trace;
    std::string format = "auto";
    tr.read("path", trace.path);
    tr.read("format", format);
    tr.reject_unknown();
    if (format == "auto") trace.format = TraceFormat::kAuto;
    else if (format == "sharegpt") trace.format = TraceFormat::kShareGpt;
    else if (format == "plain") trace.format = TraceFormat::kPlain;
    else fail(ErrorCode::kInvalidFile, "{}: workload.trace.format \"{}\" is not auto, sharegpt or plain", source, format);
    if (trace.path.empty()) fail(ErrorCode::kInvalidFile, "{}: workload.trace.path is empty", source);
    std::filesystem::path p(trace.path);
    if (p.is_relative()) trace.path = (std::filesystem::path(source).parent_path() / p).string();
    spec.trace = trace;
    if (!root->contains("num_requests")) spec.num_requests = 0;  // the whole trace
  }
  r.reject_unknown();
  if (root != &doc) {
    for (const auto& [key, node] : doc)
      if (key.str() != "workload")
        fail(ErrorCode::kInvalidFile, "{}: unknown top-level key {}", source, key.str());
  }
  return spec;
}

}  // namespace

WorkloadSpec parse_workload_spec(const std::string& toml_text, const std::string& source,
                                 const std::vector<std::string>& overrides) {
  toml::table doc;
  try {
    doc = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    fail(ErrorCode::kInvalidFile, "{}:{}:{}: {}", source, e.source().begin.line,
         e.source().begin.column, e.description());
  }
  for (const std::string& o : overrides) {
    auto [key, value] = split_assignment(o);
    // A file may hold its keys at the top level instead of under [workload].
    if (!doc.contains("workload") && key.rfind("workload.", 0) == 0) key = key.substr(9);
    set_toml_value(doc, key, value);
  }
  return read_spec(doc, source);
}

WorkloadSpec load_workload_spec(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_workload_spec(read_regular_file(path, "workload file " + path, kMaxTextFileBytes), path, overrides);
}

}  // namespace optimate::bench
