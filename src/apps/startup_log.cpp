#include "apps/startup_log.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/kv_cache_report.h"
#include "kv/kv_precision.h"
#include "optim/registry.h"

namespace optimate::apps {
namespace {

std::string option_text(const OptionValue& v) {
  if (const bool* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const int64_t* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const double* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  return fmt::format("\"{}\"", std::get<std::string>(v));
}

// "levels=3, aging_ms=5000 (default), ...": every option the optimizer reads.
std::string options_text(const optim::OptimizerRegistry& registry, const OptimizerSpec& spec,
                         const optim::BuildContext& context) {
  std::vector<std::string> parts;
  for (const optim::OptionDefault& o : registry.describe(spec, context).options) {
    const auto given = spec.options.find(o.key);
    parts.push_back(given != spec.options.end() ? fmt::format("{}={}", o.key, option_text(given->second))
                                                : fmt::format("{}={} (default)", o.key, option_text(o.fallback)));
  }
  return parts.empty() ? "no options" : fmt::format("{}", fmt::join(parts, ", "));
}

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

}  // namespace

std::vector<std::string> startup_summary(const Engine& engine, const std::string& device) {
  std::vector<std::string> out;
  const EngineConfig& config = engine.config();
  const optim::OptimizerRegistry registry = optim::OptimizerRegistry::with_builtin();
  const optim::BuildContext context{config.priority_order};
  bool any = false;
  for (const OptimizerSpec& spec : config.optimizers) {
    if (!spec.enabled) {
      out.push_back(fmt::format("optimizer {}: configured, disabled", spec.name));
      continue;
    }
    any = true;
    out.push_back(fmt::format("optimizer {} on: {}", spec.name,
                              registry.contains(spec.name) ? options_text(registry, spec, context)
                                                           : "a policy registered by the host program"));
  }
  std::vector<std::string> baselines;
  for (const OptimizerState& s : engine.optimizer_states())
    if (s.baseline) baselines.push_back(s.spec.name);
  out.push_back(fmt::format("{}; baselines in the other slots: {}", any ? "optimizers above" : "no optimizer on",
                            baselines.empty() ? std::string("none") : fmt::format("{}", fmt::join(baselines, ", "))));

  const KvCacheShape& kv = engine.runner().kv_shape();
  const EngineLimits limits = engine.limits();
  const KvCacheReport report = kv_cache_report(kv, limits.max_model_len);
  out.push_back(fmt::format(
      "KV cache planned: {} blocks of {} tokens at {} ({} tokens, {}{}), {} layers; {:.1f} sequences of the full "
      "context ({} tokens); limits: max_num_seqs {}, max_num_batched_tokens {}; prefix caching {}",
      report.num_blocks, kv.block_size, report.precision, report.size_tokens, gib(double(report.memory_bytes)),
      kv.layout.dynamic() ? fmt::format(", pages of {} slots holding kv_quant's blocks down to {}", kv.layout.page_slots,
                                        kv::kv_precision_name(*kv.layout.finest))
                          : std::string(),
      kv.num_layers, report.max_concurrency, limits.max_model_len, limits.max_num_seqs, limits.max_num_batched_tokens,
      config.enable_prefix_caching ? "on" : "off"));
  for (std::string& line : kv_cache_report_lines(report, device)) out.push_back(std::move(line));
  if (kv.num_host_slots() > 0)
    out.push_back(fmt::format("host KV tier: {} slots ({}) for swap preemption and evicted prefixes",
                              kv.num_host_slots(),
                              gib(double(kv.num_host_slots()) * double(kv.layout.slot_bytes) * 2.0 * double(kv.num_layers))));
  return out;
}

}  // namespace optimate::apps
