// A configuration to benchmark in-process: an engine configuration (configs/*.toml) with
// overrides, and the backend to build it on: the real model (CPU or CUDA) or the simulated one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench/cost_model.h"
#include "bench/observed_runner.h"
#include "config/engine_config.h"
#include "core/clock.h"
#include "engine/engine.h"

namespace optimate::bench {

struct NamedConfig {
  std::string label;        // "baseline", or the file's [bench] label
  std::string description;  // [bench] description: the table's "Configuration" column
  EngineConfig config;
};

// Reads an engine configuration file whose optional [bench] table (label, description) is for
// reports and is removed before the engine parses the rest. `overrides` are "key=value":
// "engine.max_num_seqs=64", "max_num_seqs=64" (an [engine] key), or
// "predictive.max_wait_ms=50" (an [optimizers.NAME] option). A bare name is looked up as
// configs/NAME.toml.
NamedConfig load_named_config(const std::string& name_or_path, const std::vector<std::string>& overrides,
                              const EngineConfig& base);

struct BuiltEngine {
  std::unique_ptr<Engine> engine;
  std::shared_ptr<const Clock> clock;
  std::shared_ptr<FakeClock> fake_clock;  // set for the simulated backend
  // The engine's runner, watched by the report and driven directly by --calibrate while the
  // engine is idle.
  ObservedRunner* observer = nullptr;
  std::string target;                     // "sim h200-llama3-8b", "cpu SmolLM2..."
  std::string device;                     // "sim", "cpu" or "cuda"
};

// The simulated backend: `card`'s block size replaces the config's, and its KV capacity too
// unless the config's num_kv_blocks is smaller; a max_model_len beyond the model's extends it.
BuiltEngine build_sim_engine(EngineConfig config, const CostProfile& card, int64_t logits_vocab_size);
// The real model from config.model on the backend config.device picks (create_engine_parts).
BuiltEngine build_engine(EngineConfig config);

}  // namespace optimate::bench
