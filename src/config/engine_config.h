// Everything an engine is built from: the model, the scheduler's limits, the KV cache size and
// the optimizers. Filled from defaults, then a TOML file ([engine] and [optimizers.NAME]
// tables), then command-line flags with vLLM's names; validate() names the bad field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/optimizer_options.h"
#include "core/priority_order.h"

namespace optimate {

struct EngineConfig {
  std::string model;                     // GGUF file or Hugging Face directory
  std::string tokenizer;                 // tokenizer.json directory or file, or GGUF; empty: the model's
  std::string device = "auto";           // auto (cuda when a GPU is present), cpu, cuda
  std::string load_format = "auto";      // auto, gguf, safetensors, dummy (random weights, model's shape)
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048; // token budget of one step (prefill chunks + decodes)
  int64_t max_model_len = 0;             // 0: the model's max_position_embeddings
  int64_t block_size = 16;
  bool enable_prefix_caching = true;
  std::string kv_cache_dtype = "auto";   // auto (the backend's), f32, bf16 (int8/int4 later)
  // KV cache size: num_kv_blocks if set; else, on the CPU, kv_cache_memory_bytes, and on a
  // GPU what gpu_memory_utilization of the card leaves after weights and activations.
  int64_t num_kv_blocks = 0;
  int64_t kv_cache_memory_bytes = int64_t{1} << 30;
  double gpu_memory_utilization = 0.9;   // vLLM's meaning: share of the whole card for this process
  std::string scheduling_policy = "fcfs";  // the queue optimizer: fcfs, or a registered name
  // How clients' `priority` values point; the engine works higher-first.
  PriorityOrder priority_order = PriorityOrder::kHigherFirst;
  uint64_t seed = 0;                       // seeds requests that bring none
  int64_t num_threads = 0;                 // CPU backend; 0 = all cores
  std::vector<OptimizerSpec> optimizers;

  // Throws Error(kInvalidArgument) naming the offending option.
  void validate() const;
  // The effective configuration as a TOML document (what --print-config shows).
  std::string to_toml() const;
};

// Parses a TOML document onto `base` (keys absent from the document keep base's values).
// Unknown keys and wrong types are Error(kInvalidFile) naming `source` and the key.
EngineConfig parse_engine_config_toml(std::string_view text, const std::string& source,
                                      EngineConfig base = {});
EngineConfig load_engine_config_file(const std::string& path, EngineConfig base = {});

// "4GiB", "512MiB", "1.5GB", "1048576": bytes. Error(kInvalidArgument) naming `what`.
int64_t parse_byte_size(std::string_view text, std::string_view what);
// "name" or "name:key=value,key=value"; values parse as bool, integer, float, else string.
OptimizerSpec parse_optimizer_flag(std::string_view text);

}  // namespace optimate
