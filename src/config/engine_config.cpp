#include "config/engine_config.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace optimate {

void EngineConfig::validate() const {
  auto bad = [](const char* field, const auto& value, const char* rule) {
    fail(ErrorCode::kInvalidArgument, "{} must be {}, got {}", field, rule, value);
  };
  if (max_num_seqs < 1) bad("max-num-seqs", max_num_seqs, "at least 1");
  if (max_num_batched_tokens < 1) bad("max-num-batched-tokens", max_num_batched_tokens, "at least 1");
  if (max_model_len < 0) bad("max-model-len", max_model_len, "positive (or 0 for the model's)");
  if (block_size < 1 || block_size > 1024 || (block_size & (block_size - 1)) != 0)
    bad("block-size", block_size, "a power of two in [1, 1024]");
  if (num_kv_blocks < 0) bad("num-kv-blocks", num_kv_blocks, "non-negative");
  if (device != "auto" && device != "cpu" && device != "cuda") bad("device", device, "auto, cpu or cuda");
  if (load_format != "auto" && load_format != "gguf" && load_format != "safetensors" && load_format != "dummy")
    bad("load-format", load_format, "auto, gguf, safetensors or dummy");
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0))
    bad("gpu-memory-utilization", gpu_memory_utilization, "in (0, 1]");
  if (kv_cache_memory_bytes < 0) bad("kv-cache-memory", kv_cache_memory_bytes, "non-negative");
  if (kv_cache_dtype != "auto" && kv_cache_dtype != "f32" && kv_cache_dtype != "float32" &&
      kv_cache_dtype != "bf16" && kv_cache_dtype != "bfloat16" && kv_cache_dtype != "int8" &&
      kv_cache_dtype != "int4")
    bad("kv-cache-dtype", kv_cache_dtype, "one of auto, f32, bf16, int8, int4");
  if (scheduling_policy.empty()) bad("scheduling-policy", "''", "a queue optimizer name");
  if (num_threads < 0) bad("num-threads", num_threads, "non-negative");
  for (size_t i = 0; i < optimizers.size(); ++i) {
    if (optimizers[i].name.empty())
      fail(ErrorCode::kInvalidArgument, "optimizer #{} has no name", i + 1);
    for (size_t j = 0; j < i; ++j)
      if (optimizers[j].name == optimizers[i].name)
        fail(ErrorCode::kInvalidArgument, "optimizer '{}' is configured twice", optimizers[i].name);
  }
}

namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out + "\"";
}

std::string value_text(const OptionValue& v) {
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) {
    std::ostringstream os;
    os.precision(17);
    os << *d;
    std::string s = os.str();
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  return quote(std::get<std::string>(v));
}

}  // namespace

std::string EngineConfig::to_toml() const {
  std::ostringstream os;
  os << "[engine]\n"
     << "model = " << quote(model) << "\n"
     << "tokenizer = " << quote(tokenizer) << "\n"
     << "device = " << quote(device) << "\n"
     << "load_format = " << quote(load_format) << "\n"
     << "max_num_seqs = " << max_num_seqs << "\n"
     << "max_num_batched_tokens = " << max_num_batched_tokens << "\n"
     << "max_model_len = " << max_model_len << "\n"
     << "block_size = " << block_size << "\n"
     << "enable_prefix_caching = " << (enable_prefix_caching ? "true" : "false") << "\n"
     << "kv_cache_dtype = " << quote(kv_cache_dtype) << "\n"
     << "num_kv_blocks = " << num_kv_blocks << "\n"
     << "kv_cache_memory = " << kv_cache_memory_bytes << "\n"
     << "gpu_memory_utilization = " << value_text(gpu_memory_utilization) << "\n"
     << "scheduling_policy = " << quote(scheduling_policy) << "\n"
     << "priority_order = " << quote(std::string(priority_order_name(priority_order))) << "\n"
     << "seed = " << seed << "\n"
     << "num_threads = " << num_threads << "\n";
  for (const auto& spec : optimizers) {
    os << "\n[optimizers." << spec.name << "]\n";
    if (!spec.enabled) os << "enabled = false\n";
    for (const auto& [key, value] : spec.options) os << key << " = " << value_text(value) << "\n";
  }
  return os.str();
}

}  // namespace optimate
