#include "bench/bench_target.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "bench/sim_runner.h"
#include "bench/toml_override.h"
#include "core/error.h"
#include "kv/host_tier.h"
#include "optim/kv_quant_policy.h"

namespace optimate::bench {
namespace {

std::string resolve_config_path(const std::string& name_or_path) {
  if (std::filesystem::exists(name_or_path)) return name_or_path;
  const std::string in_configs = "configs/" + name_or_path + ".toml";
  if (name_or_path.find('/') == std::string::npos && std::filesystem::exists(in_configs)) return in_configs;
  fail(ErrorCode::kNotFound, "configuration '{}' not found (neither a file nor {})", name_or_path, in_configs);
}

// "max_num_seqs" -> "engine.max_num_seqs"; "predictive.max_wait_ms" -> "optimizers.predictive.max_wait_ms".
std::string qualify_key(const std::string& key) {
  if (key.rfind("engine.", 0) == 0 || key.rfind("optimizers.", 0) == 0 || key.rfind("bench.", 0) == 0) return key;
  if (key.find('.') == std::string::npos) return "engine." + key;
  return "optimizers." + key;
}

}  // namespace

NamedConfig load_named_config(const std::string& name_or_path, const std::vector<std::string>& overrides,
                              const EngineConfig& base) {
  const std::string path = resolve_config_path(name_or_path);
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    fail(ErrorCode::kInvalidFile, "{}:{}:{}: {}", path, e.source().begin.line, e.source().begin.column,
         std::string(e.description()));
  }
  for (const std::string& o : overrides) {
    auto [key, value] = split_assignment(o);
    set_toml_value(doc, qualify_key(key), value);
  }
  NamedConfig out;
  out.label = std::filesystem::path(path).stem().string();
  if (const toml::table* b = doc["bench"].as_table()) {
    for (const auto& [k, v] : *b) {
      if (k.str() == "label" && v.is_string()) out.label = *v.value<std::string>();
      else if (k.str() == "description" && v.is_string()) out.description = *v.value<std::string>();
      else fail(ErrorCode::kInvalidFile, "{}: unknown key bench.{} (expected label or description strings)", path, k.str());
    }
    doc.erase("bench");
  }
  std::ostringstream text;
  text << doc;
  out.config = parse_engine_config_toml(text.str(), path, base);
  return out;
}

BuiltEngine build_sim_engine(EngineConfig config, const CostProfile& card, int64_t logits_vocab_size) {
  config.validate();  // as the other backends do, before the card's block size and capacity replace it
  BuiltEngine b;
  b.fake_clock = std::make_shared<FakeClock>(0);
  b.clock = b.fake_clock;
  // The card's KV capacity, or less when the configuration asks for less (as num-kv-blocks
  // does on a GPU); a context beyond the model's when the configuration asks for it (the CUDA
  // runner allocates what max_model_len says).
  CostProfile profile = card;
  if (config.num_kv_blocks > 0) profile.num_kv_blocks = std::min(profile.num_kv_blocks, config.num_kv_blocks);
  if (config.max_model_len > profile.model.max_position_embeddings)
    profile.model.max_position_embeddings = config.max_model_len;
  // kv_quant, when configured, lays the cache out for its quantized blocks, as
  // create_engine_parts does on the backends; a static quantized cache holds the same memory in
  // blocks of its precision. So here num_kv_blocks names memory (that many full-precision blocks),
  // where on a GPU it counts the cache's own slots. FP8 weights halve the projections' bytes.
  const auto [finest, int4_keys] = optim::kv_layout_request(config.optimizers);
  const kv::KvPrecision dtype = kv::kv_precision_for(config.kv_cache_dtype, kv::KvPrecision::kBF16);
  const std::optional<kv::KvPrecision> quantized =
      kv::is_full_precision(dtype) ? std::nullopt : std::optional<kv::KvPrecision>(dtype);
  profile.fp8_weights = config.quantization == WeightQuantization::kFp8;
  const kv::KvLayout layout = SimModelRunner::plan_layout(profile, finest, int4_keys, quantized);
  config.block_size = profile.block_size;
  config.num_kv_blocks = SimModelRunner::num_slots(profile, layout);
  if (config.max_model_len == 0) config.max_model_len = profile.model.max_position_embeddings;
  // The host tier the settings ask for, when the profile can time its copies.
  const kv::HostTierSlots host = profile.host_link_bytes_per_s > 0.0
                                      ? plan_host_tier(config, profile.model.num_layers, layout)
                                      : kv::HostTierSlots{};
  auto observed = std::make_unique<ObservedRunner>(
      std::make_unique<SimModelRunner>(profile, b.fake_clock, logits_vocab_size, host, finest, int4_keys, quantized),
      b.clock);
  b.observer = observed.get();
  EngineParts parts;
  parts.runner = std::move(observed);
  parts.clock = b.clock;
  b.engine = std::make_unique<Engine>(std::move(config), std::move(parts));
  b.target = "sim " + profile.name;
  b.device = "sim";
  return b;
}

BuiltEngine build_engine(EngineConfig config) {
  EngineParts parts = create_engine_parts(config);
  BuiltEngine b;
  b.clock = std::make_shared<SteadyClock>();
  auto observed = std::make_unique<ObservedRunner>(std::move(parts.runner), b.clock);
  b.observer = observed.get();
  parts.runner = std::move(observed);
  parts.clock = b.clock;
  b.target = parts.description;
  b.device = parts.device;
  b.engine = std::make_unique<Engine>(std::move(config), std::move(parts));
  return b;
}

}  // namespace optimate::bench
