#include "engine/optimizer_set.h"

#include <algorithm>

#include "core/error.h"
#include "core/logging.h"

namespace optimate {

OptimizerSet::OptimizerSet(optim::OptimizerRegistry registry, optim::BuildContext context,
                           std::shared_ptr<GuardContext> guard)
    : registry_(std::move(registry)),
      context_(context),
      guard_(std::move(guard)),
      baselines_(optim::with_baselines({})) {
  rebuild();
}

std::shared_ptr<OptimizerHealth> OptimizerSet::health(const std::string& name, bool baseline) {
  auto& h = health_[name];
  if (!h) {
    h = std::make_shared<OptimizerHealth>();
    h->optimizer = name;
    h->baseline = baseline;
  }
  return h;
}

OptimizerSet::Entry* OptimizerSet::find(const std::string& name) {
  for (Entry& e : entries_)
    if (e.spec.name == name) return &e;
  return nullptr;
}

optim::PolicySet OptimizerSet::validate(const std::vector<OptimizerSpec>& specs) const {
  return registry_.build_all(specs, context_);
}

void OptimizerSet::configure(const std::vector<OptimizerSpec>& specs) {
  std::vector<Entry> next;
  for (const OptimizerSpec& spec : specs)
    next.push_back({spec, spec.enabled ? registry_.build(spec, context_) : optim::PolicySet{}, {}, false});
  std::vector<std::pair<std::string, optim::PolicySet>> enabled;
  for (const Entry& e : next)
    if (e.spec.enabled) enabled.emplace_back(e.spec.name, e.built);
  optim::merge_policy_sets(enabled);  // two claiming one slot: nothing changes
  entries_ = std::move(next);
  good_ = specs;
  rebuild();
}

void OptimizerSet::set(const OptimizerSpec& spec) {
  if (!registry_.contains(spec.name)) registry_.build(spec, context_);  // Error(kNotFound) naming the known ones
  optim::PolicySet built = spec.enabled ? registry_.build(spec, context_) : optim::PolicySet{};
  Entry* e = find(spec.name);
  std::vector<Entry> before = entries_;
  if (!e) {
    entries_.push_back({spec, std::move(built), {}, false});
  } else {
    const bool keep_state = spec.enabled && e->spec.options == spec.options && !e->built.all().empty();
    if (!keep_state) e->built = std::move(built);
    e->spec = spec;
    e->fallback.reset();
    e->rolled_back = false;
  }
  try {
    rebuild();
  } catch (...) {
    entries_ = std::move(before);
    rebuild();
    throw;
  }
  std::erase_if(good_, [&](const OptimizerSpec& s) { return s.name == spec.name; });
  good_.push_back(spec);
}

void OptimizerSet::rollback() {
  for (Entry& e : entries_) {
    if (!e.spec.enabled) continue;
    e.spec.enabled = false;
    e.built = {};
    e.rolled_back = true;
  }
  rebuild();
}

void OptimizerSet::restore() {
  configure(std::vector<OptimizerSpec>(good_));
}

void OptimizerSet::disable(Entry& e, const PolicyFault& fault, int64_t now_ns) {
  e.spec.enabled = false;
  e.built = {};
  e.fallback = OptimizerFallback{fault.reason, fault.detail, now_ns};
  ++fallback_counts_[{e.spec.name, std::string(fallback_reason_name(fault.reason))}];
}

std::vector<std::pair<std::string, PolicyFault>> OptimizerSet::take_faults(int64_t now_ns) {
  std::vector<std::pair<std::string, PolicyFault>> out;
  for (auto& [name, h] : health_) {
    if (!h->fault) continue;
    const PolicyFault fault = *h->fault;
    h->fault.reset();
    h->slow_calls_in_a_row = 0;
    Entry* e = find(name);
    if (!e || !e->spec.enabled) continue;
    disable(*e, fault, now_ns);
    out.emplace_back(name, fault);
  }
  if (!out.empty()) rebuild();
  return out;
}

bool OptimizerSet::fall_back(const std::string& name, const PolicyFault& fault, int64_t now_ns) {
  Entry* e = find(name);
  if (!e || !e->spec.enabled) return false;
  disable(*e, fault, now_ns);
  rebuild();
  return true;
}

void OptimizerSet::rebuild() {
  std::vector<std::pair<std::string, optim::PolicySet>> guarded;
  for (const Entry& e : entries_)
    if (e.spec.enabled) guarded.emplace_back(e.spec.name, guard_policies(e.built, health(e.spec.name, false), &baselines_, guard_));
  optim::PolicySet merged = optim::merge_policy_sets(guarded);
  std::array<std::string, optim::kNumPolicySlots> owners;
  for (const auto& [name, set] : guarded)
    for (const optim::PolicySlotInfo& info : optim::kPolicySlots)
      if (set.at(info.slot)) owners[static_cast<size_t>(info.slot)] = name;
  // Each empty slot gets its baseline, guarded for its time (its errors propagate: there is
  // nothing below a baseline).
  for (const optim::PolicySlotInfo& info : optim::kPolicySlots) {
    const optim::Policy* base = baselines_.at(info.slot);
    if (merged.at(info.slot) || !base) continue;
    const auto h = health(std::string(base->name()), true);
    merged = optim::merge_policy_sets({{"", merged}, {"", guard_policies(baselines_.only(info.slot), h, nullptr, guard_)}});
  }
  merged_ = std::move(merged);
  owners_ = std::move(owners);
}

std::vector<OptimizerSpec> OptimizerSet::active_specs() const {
  std::vector<OptimizerSpec> out;
  for (const Entry& e : entries_) out.push_back(e.spec);
  return out;
}

std::vector<OptimizerState> OptimizerSet::states() const {
  std::vector<OptimizerState> out;
  for (const Entry& e : entries_) {
    OptimizerState s;
    s.spec = e.spec;
    s.rolled_back = e.rolled_back;
    s.fallback = e.fallback;
    if (auto it = health_.find(e.spec.name); it != health_.end()) s.seconds_total = it->second->seconds_total;
    for (const optim::Policy* p : e.built.all())
      for (const optim::PolicyCounter& c : p->counters()) s.counters.push_back(c);
    out.push_back(std::move(s));
  }
  // The baselines running in the slots no optimizer takes.
  for (const optim::PolicySlotInfo& info : optim::kPolicySlots) {
    const size_t i = static_cast<size_t>(info.slot);
    const optim::Policy* base = baselines_.at(info.slot);
    if (!owners_[i].empty() || !merged_.at(info.slot) || !base) continue;
    // A configured entry of the baseline's own name (disabled: it runs anyway) is that one.
    auto same = std::ranges::find_if(out, [&](const OptimizerState& o) { return o.spec.name == base->name(); });
    OptimizerState& s = same != out.end() ? *same : out.emplace_back();
    s.spec.name = std::string(base->name());
    s.baseline = true;
    if (auto it = health_.find(s.spec.name); it != health_.end()) s.seconds_total = it->second->seconds_total;
    s.counters = base->counters();
  }
  return out;
}

std::map<std::string, double> OptimizerSet::seconds() const {
  std::map<std::string, double> out;
  for (const auto& [name, h] : health_) out[name] = h->seconds_total;
  return out;
}

}  // namespace optimate
