// Command-line flags of the engine, with vLLM's names where vLLM has the flag. Flags override
// the TOML file given by --config, which overrides the defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/engine_config.h"

namespace CLI {
class App;
}

namespace optimate {

struct EngineFlags {
  std::string config_path;
  std::optional<std::string> model;
  std::optional<std::string> tokenizer;
  std::optional<std::string> device;
  std::optional<std::string> load_format;
  std::optional<double> gpu_memory_utilization;
  std::optional<int64_t> max_num_seqs;
  std::optional<int64_t> max_num_batched_tokens;
  std::optional<int64_t> max_model_len;
  std::optional<int64_t> block_size;
  std::optional<bool> enable_prefix_caching;
  std::optional<std::string> kv_cache_dtype;
  std::optional<std::string> kv_cache_memory;  // a size: "4GiB"
  std::optional<int64_t> num_kv_blocks;
  std::optional<std::string> scheduling_policy;
  std::optional<std::string> priority_order;
  std::optional<int64_t> seed;
  std::optional<int64_t> num_threads;
  std::vector<std::string> optimizers;  // --optimizer name[:key=value,...], repeatable
  bool print_config = false;
};

// Registers the flags on a subcommand (serve, generate, bench); `flags` must outlive parsing.
// `with_model` adds --model (subcommands that take it positionally pass false).
void add_engine_flags(CLI::App& app, EngineFlags& flags, bool with_model = true);

// Defaults, then the --config file, then the flags; validated.
EngineConfig resolve_engine_config(const EngineFlags& flags);

}  // namespace optimate
