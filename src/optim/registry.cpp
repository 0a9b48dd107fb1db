#include "optim/registry.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/ranges.h>

#include "core/error.h"
#include "optim/adaptive_controller.h"
#include "optim/baselines.h"
#include "optim/kernel_variants.h"
#include "optim/scheduling_optimizers.h"

namespace optimate::optim {

const OptionValue* OptionReader::find(const std::string& key, OptionValue fallback) {
  read_.push_back({key, std::move(fallback)});
  auto it = spec_.options.find(key);
  return it == spec_.options.end() ? nullptr : &it->second;
}

bool OptionReader::get_bool(const std::string& key, bool fallback) {
  const OptionValue* v = find(key, fallback);
  if (!v) return fallback;
  if (auto* b = std::get_if<bool>(v)) return *b;
  fail(ErrorCode::kInvalidArgument, "optimizers.{}.{} must be a boolean", spec_.name, key);
}

int64_t OptionReader::get_int(const std::string& key, int64_t fallback) {
  const OptionValue* v = find(key, fallback);
  if (!v) return fallback;
  if (auto* i = std::get_if<int64_t>(v)) return *i;
  fail(ErrorCode::kInvalidArgument, "optimizers.{}.{} must be an integer", spec_.name, key);
}

double OptionReader::get_double(const std::string& key, double fallback) {
  const OptionValue* v = find(key, fallback);
  if (!v) return fallback;
  if (auto* d = std::get_if<double>(v)) {
    if (!std::isfinite(*d)) fail(ErrorCode::kInvalidArgument, "optimizers.{}.{} must be a finite number", spec_.name, key);
    return *d;
  }
  if (auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  fail(ErrorCode::kInvalidArgument, "optimizers.{}.{} must be a number", spec_.name, key);
}

double OptionReader::get_ms(const std::string& key, double fallback, double max_ms) {
  const double ms = get_double(key, fallback);
  if (ms > max_ms)
    fail(ErrorCode::kInvalidArgument, "optimizers.{}.{} must be at most {} ms, got {}", spec_.name, key, max_ms, ms);
  return ms;
}

std::string OptionReader::get_string(const std::string& key, const std::string& fallback) {
  const OptionValue* v = find(key, fallback);
  if (!v) return fallback;
  if (auto* s = std::get_if<std::string>(v)) return *s;
  fail(ErrorCode::kInvalidArgument, "optimizers.{}.{} must be a string", spec_.name, key);
}

std::string OptionReader::get_int_or_string(const std::string& key, const std::string& fallback) {
  const OptionValue* v = find(key, fallback);
  if (!v) return fallback;
  if (auto* s = std::get_if<std::string>(v)) return *s;
  if (auto* i = std::get_if<int64_t>(v)) return std::to_string(*i);
  fail(ErrorCode::kInvalidArgument, "optimizers.{}.{} must be an integer or a string", spec_.name, key);
}

void OptionReader::finish() const {
  for (const auto& [key, value] : spec_.options)
    if (std::none_of(read_.begin(), read_.end(), [&](const OptionDefault& r) { return r.key == key; }))
      fail(ErrorCode::kInvalidArgument, "optimizers.{} has no option '{}'", spec_.name, key);
}

OptimizerRegistry OptimizerRegistry::with_builtin() {
  OptimizerRegistry r;
  // Each slot's baseline under its name; it takes no options and fills its one slot.
  for (const PolicySlotInfo& info : kPolicySlots) {
    if (info.baseline.empty()) continue;
    r.register_optimizer(std::string(info.baseline), std::string(info.baseline_description),
                         [slot = info.slot](OptionReader&) {
                           PolicySet set;
                           visit_slots([&](PolicySlot s, auto& p) { if (s == slot) make_baseline(p); }, set);
                           return set;
                         });
  }
  register_scheduling_optimizers(r);
  register_kernel_optimizer(r);
  register_adaptive_optimizer(r);
  return r;
}

void OptimizerRegistry::register_optimizer(const std::string& name, const std::string& description,
                                           OptimizerFactory factory) {
  if (!entries_.emplace(name, Entry{description, std::move(factory)}).second)
    fail(ErrorCode::kInvalidArgument, "optimizer '{}' is registered twice", name);
}

void OptimizerRegistry::register_optimizer(const std::string& name, const std::string& description,
                                           SimpleOptimizerFactory factory) {
  register_optimizer(name, description,
                     [f = std::move(factory)](OptionReader& reader, const BuildContext&) { return f(reader); });
}

std::vector<std::string> OptimizerRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

const OptimizerRegistry::Entry& OptimizerRegistry::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    fail(ErrorCode::kNotFound, "unknown optimizer '{}' (known: {})", name, fmt::join(names(), ", "));
  return it->second;
}

PolicySet OptimizerRegistry::build(const OptimizerSpec& spec, const BuildContext& context) const {
  OptionReader reader(spec);
  PolicySet set = entry(spec.name).factory(reader, context);
  reader.finish();
  return set;
}

OptimizerInfo OptimizerRegistry::describe(const std::string& name, const BuildContext& context) const {
  return describe(OptimizerSpec{name, {}}, context);
}

OptimizerInfo OptimizerRegistry::describe(const OptimizerSpec& spec, const BuildContext& context) const {
  const Entry& e = entry(spec.name);
  OptionReader reader(spec);
  e.factory(reader, context);
  return {spec.name, e.description, reader.read()};
}

PolicySet OptimizerRegistry::build_all(const std::vector<OptimizerSpec>& specs,
                                       const BuildContext& context) const {
  std::vector<std::pair<std::string, PolicySet>> sets;
  for (const auto& spec : specs)
    if (spec.enabled) sets.emplace_back(spec.name, build(spec, context));
  return merge_policy_sets(sets);
}

PolicySet merge_policy_sets(const std::vector<std::pair<std::string, PolicySet>>& sets) {
  PolicySet merged;
  std::array<std::string, kNumPolicySlots> owner;
  for (const auto& entry : sets) {
    const std::string& name = entry.first;
    visit_slots(
        [&](PolicySlot slot, auto& dst, const auto& src) {
          if (!src) return;
          std::string& o = owner[static_cast<size_t>(slot)];
          if (dst)
            fail(ErrorCode::kInvalidArgument, "optimizers '{}' and '{}' both set the {} policy", o, name,
                 slot_info(slot).name);
          dst = src;
          o = name;
        },
        merged, entry.second);
  }
  return merged;
}

}  // namespace optimate::optim
