#include "config/engine_config.h"

#include <sstream>

#include "config/settings.h"
#include "config/toml_text.h"
#include "core/error.h"
#include "core/logging.h"

namespace optimate {

void EngineConfig::validate() const {
  for (const SettingInfo& s : engine_settings()) s.check(*this);
  if (max_num_seqs_capacity != 0 && max_num_seqs_capacity < max_num_seqs)
    fail(ErrorCode::kInvalidArgument, "max-num-seqs-capacity {} is below max-num-seqs {}", max_num_seqs_capacity,
         max_num_seqs);
  if (max_num_batched_tokens_capacity != 0 && max_num_batched_tokens_capacity < max_num_batched_tokens)
    fail(ErrorCode::kInvalidArgument, "max-num-batched-tokens-capacity {} is below max-num-batched-tokens {}",
         max_num_batched_tokens_capacity, max_num_batched_tokens);
  for (size_t i = 0; i < optimizers.size(); ++i) {
    if (optimizers[i].name.empty())
      fail(ErrorCode::kInvalidArgument, "optimizer #{} has no name", i + 1);
    for (size_t j = 0; j < i; ++j)
      if (optimizers[j].name == optimizers[i].name)
        fail(ErrorCode::kInvalidArgument, "optimizer '{}' is configured twice", optimizers[i].name);
  }
}

std::string option_toml(const OptionValue& v) {
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) return toml_double(*d);
  return toml_quote(std::get<std::string>(v));
}

std::string EngineConfig::to_toml(bool only_changed) const {
  const EngineConfig defaults;
  std::ostringstream os;
  os << "[engine]\n";
  for (const SettingInfo& s : engine_settings()) {
    const std::string value = s.to_toml(*this);
    if (value.empty() || (only_changed && value == s.to_toml(defaults))) continue;
    os << s.key << " = " << value << "\n";
  }
  for (const auto& spec : optimizers) {
    os << "\n[optimizers." << spec.name << "]\n";
    if (!spec.enabled) os << "enabled = false\n";
    for (const auto& [key, value] : spec.options) os << key << " = " << option_toml(value) << "\n";
  }
  return os.str();
}

kv::HostTierSlots plan_host_tier(const EngineConfig& config, int64_t num_layers, const kv::KvLayout& layout,
                                 int64_t cap_bytes) {
  // Recompute never swaps: no host memory is set aside for it.
  double swap = config.preemption_mode == PreemptionMode::kRecompute ? 0.0 : static_cast<double>(gib_bytes(config.swap_space));
  double prefix =
      config.enable_prefix_caching ? static_cast<double>(gib_bytes(config.host_prefix_cache_space)) : 0.0;
  if (cap_bytes > 0 && swap + prefix > static_cast<double>(cap_bytes)) {
    const double scale = static_cast<double>(cap_bytes) / (swap + prefix);
    spdlog::info("host KV tier: {:.2f} GiB asked, {:.2f} GiB given", (swap + prefix) / 1073741824.0,
                 static_cast<double>(cap_bytes) / 1073741824.0);
    swap *= scale;
    prefix *= scale;
  }
  return kv::plan_host_tier(static_cast<int64_t>(swap), static_cast<int64_t>(prefix), num_layers, layout);
}

}  // namespace optimate
