#include "config/engine_cli.h"

#include <CLI/CLI.hpp>

#include "core/error.h"

namespace optimate {

void add_engine_flags(CLI::App& app, EngineFlags& f, bool with_model) {
  app.add_option("--config", f.config_path, "TOML file with [engine] and [optimizers.NAME] tables");
  if (with_model) app.add_option("--model", f.model, "GGUF file or Hugging Face model directory");
  app.add_option("--tokenizer", f.tokenizer, "tokenizer.json (or its directory) or GGUF file (default: the model's)");
  app.add_option("--device", f.device, "auto (a GPU when present), cpu or cuda");
  app.add_option("--load-format", f.load_format,
                 "auto, gguf, safetensors, or dummy: seeded random weights of the model's shape (GPU)");
  app.add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                 "share of the GPU's memory for weights, activations and KV cache (default 0.9)");
  app.add_option("--max-num-seqs", f.max_num_seqs, "most sequences in one step (default 256)");
  app.add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                 "token budget of one step, prefill chunks and decodes together (default 2048)");
  app.add_option("--max-model-len", f.max_model_len, "context length (default: the model's)");
  app.add_option("--block-size", f.block_size, "tokens per KV cache block (default 16)");
  app.add_flag_callback("--enable-prefix-caching", [&f] { f.enable_prefix_caching = true; },
                        "reuse the KV of shared prompt prefixes (default on)");
  app.add_flag_callback("--no-enable-prefix-caching", [&f] { f.enable_prefix_caching = false; },
                        "turn prefix caching off");
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype, "auto, f32, bf16");
  app.add_option("--kv-cache-memory", f.kv_cache_memory,
                 "KV cache size on the CPU backend, e.g. 4GiB (default 1GiB)");
  app.add_option("--num-kv-blocks", f.num_kv_blocks, "KV cache size in blocks (overrides memory)");
  app.add_option("--scheduling-policy", f.scheduling_policy, "queue order: fcfs or an optimizer name");
  app.add_option("--priority-order", f.priority_order,
                 "higher-first (default): a larger priority runs first; lower-first: vLLM's rule");
  app.add_option("--seed", f.seed, "seed for requests that bring none");
  app.add_option("--num-threads", f.num_threads, "CPU backend threads (default: all cores)");
  app.add_option("--optimizer", f.optimizers, "enable an optimizer: NAME[:key=value,...]; repeatable");
  app.add_flag("--print-config", f.print_config, "print the effective configuration as TOML");
}

EngineConfig resolve_engine_config(const EngineFlags& f) {
  EngineConfig c;
  if (!f.config_path.empty()) c = load_engine_config_file(f.config_path, c);
  if (f.model) c.model = *f.model;
  if (f.tokenizer) c.tokenizer = *f.tokenizer;
  if (f.device) c.device = *f.device;
  if (f.load_format) c.load_format = *f.load_format;
  if (f.gpu_memory_utilization) c.gpu_memory_utilization = *f.gpu_memory_utilization;
  if (f.max_num_seqs) c.max_num_seqs = *f.max_num_seqs;
  if (f.max_num_batched_tokens) c.max_num_batched_tokens = *f.max_num_batched_tokens;
  if (f.max_model_len) c.max_model_len = *f.max_model_len;
  if (f.block_size) c.block_size = *f.block_size;
  if (f.enable_prefix_caching) c.enable_prefix_caching = *f.enable_prefix_caching;
  if (f.kv_cache_dtype) c.kv_cache_dtype = *f.kv_cache_dtype;
  if (f.kv_cache_memory) c.kv_cache_memory_bytes = parse_byte_size(*f.kv_cache_memory, "--kv-cache-memory");
  if (f.num_kv_blocks) c.num_kv_blocks = *f.num_kv_blocks;
  if (f.scheduling_policy) c.scheduling_policy = *f.scheduling_policy;
  if (f.priority_order) c.priority_order = parse_priority_order(*f.priority_order, "--priority-order");
  if (f.seed) {
    if (*f.seed < 0) fail(ErrorCode::kInvalidArgument, "--seed must be non-negative, got {}", *f.seed);
    c.seed = static_cast<uint64_t>(*f.seed);
  }
  if (f.num_threads) c.num_threads = *f.num_threads;
  for (const auto& text : f.optimizers) {
    OptimizerSpec spec = parse_optimizer_flag(text);
    std::erase_if(c.optimizers, [&](const OptimizerSpec& o) { return o.name == spec.name; });
    c.optimizers.push_back(std::move(spec));
  }
  c.validate();
  return c;
}

}  // namespace optimate
