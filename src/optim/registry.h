// Builds optimizers by name, from `[optimizers.NAME]` tables or CLI flags. An optimizer fills
// one or more policy slots; adding one is a register_optimizer() call and a factory, with no
// change to the scheduler or the engine.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "config/optimizer_options.h"
#include "core/priority_order.h"
#include "optim/api/policy_set.h"

namespace optimate::optim {

// An option an optimizer reads, with its type (the alternative held) and default.
struct OptionDefault {
  std::string key;
  OptionValue fallback;
};

// Typed access to an optimizer's options; finish() rejects keys nobody read, so a typo in a
// TOML table is an error instead of a silently ignored knob. It remembers every key read with
// its default, which is how the registry describes an optimizer's options.
class OptionReader {
 public:
  explicit OptionReader(const OptimizerSpec& spec) : spec_(spec) {}
  bool get_bool(const std::string& key, bool fallback);
  int64_t get_int(const std::string& key, int64_t fallback);
  double get_double(const std::string& key, double fallback);  // ints accepted too; finite only
  // A duration in ms, at most `max_ms` (by default 10^12 ms, some 31 years: beyond, its
  // nanoseconds would not fit the clock's integers).
  double get_ms(const std::string& key, double fallback, double max_ms = 1e12);
  std::string get_string(const std::string& key, const std::string& fallback);
  // An integer or a string, as text ("8", "fp8").
  std::string get_int_or_string(const std::string& key, const std::string& fallback);
  void finish() const;
  const std::vector<OptionDefault>& read() const { return read_; }

 private:
  const OptionValue* find(const std::string& key, OptionValue fallback);
  const OptimizerSpec& spec_;
  std::vector<OptionDefault> read_;
};

// What an optimizer may know of the engine it is built for.
struct BuildContext {
  // The clients' convention: priorities reach the policies in the engine's (higher-first),
  // but defaults that name priority values (the priority levels) follow the clients'.
  PriorityOrder priority_order = PriorityOrder::kHigherFirst;
};

// Builds an optimizer's policies from its options; the registry calls finish() afterwards.
using OptimizerFactory = std::function<PolicySet(OptionReader&, const BuildContext&)>;
// For optimizers that need no BuildContext.
using SimpleOptimizerFactory = std::function<PolicySet(OptionReader&)>;

struct OptimizerInfo {
  std::string name;
  std::string description;
  std::vector<OptionDefault> options;  // in the order the factory reads them
};

class OptimizerRegistry {
 public:
  // A registry holding each slot's baseline under its name (optim/api/policy_set.h) and the
  // built optimizers (priority, predictive, kv_quant, kernels, adaptive).
  static OptimizerRegistry with_builtin();

  void register_optimizer(const std::string& name, const std::string& description,
                          OptimizerFactory factory);
  void register_optimizer(const std::string& name, const std::string& description,
                          SimpleOptimizerFactory factory);
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  std::vector<std::string> names() const;

  // Builds one optimizer; Error(kNotFound) for an unknown name (listing the known ones).
  PolicySet build(const OptimizerSpec& spec, const BuildContext& context = {}) const;
  // The optimizer's options and their defaults, found by building it with none set.
  OptimizerInfo describe(const std::string& name, const BuildContext& context = {}) const;
  // The same, built with `spec`'s options: the options it reads may depend on them (the
  // priority optimizer's per-level bounds follow its `levels`). Unknown keys are not errors here.
  OptimizerInfo describe(const OptimizerSpec& spec, const BuildContext& context = {}) const;
  // Builds every enabled spec and merges them; two optimizers claiming the same slot is an
  // Error(kInvalidArgument). Empty slots stay empty (see with_baselines).
  PolicySet build_all(const std::vector<OptimizerSpec>& specs, const BuildContext& context = {}) const;

 private:
  struct Entry {
    std::string description;
    OptimizerFactory factory;
  };
  const Entry& entry(const std::string& name) const;
  std::map<std::string, Entry> entries_;
};

// Merges optimizers' policy sets in order; two claiming the same slot is an
// Error(kInvalidArgument) naming both.
PolicySet merge_policy_sets(const std::vector<std::pair<std::string, PolicySet>>& sets);

}  // namespace optimate::optim
