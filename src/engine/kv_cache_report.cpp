#include "engine/kv_cache_report.h"

#include <algorithm>

#include <fmt/format.h>

namespace optimate {
namespace {

// 154752 -> "154,752", as Python's "{:,}" writes it.
std::string with_thousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

}  // namespace

int64_t engine_context_length(int64_t max_model_len_setting, const ModelRunner& runner) {
  if (max_model_len_setting > 0) return max_model_len_setting;
  return std::min(runner.config().max_position_embeddings, runner.capacity().max_model_len);
}

KvCacheReport kv_cache_report(const KvCacheShape& shape, int64_t max_model_len) {
  KvCacheReport r;
  const int64_t slots_per_block = shape.layout.slots_for(shape.layout.base);
  r.num_blocks = shape.num_blocks / slots_per_block;
  r.block_size = shape.block_size;
  r.size_tokens = r.num_blocks * r.block_size;
  r.memory_bytes = 2 * shape.num_layers * shape.num_blocks * shape.layout.slot_bytes;
  r.max_model_len = max_model_len;
  const int64_t blocks_per_seq = (max_model_len + shape.block_size - 1) / shape.block_size;
  r.max_concurrency = blocks_per_seq > 0 ? static_cast<double>(r.num_blocks) / static_cast<double>(blocks_per_seq) : 0.0;
  r.num_host_blocks = shape.num_host_slots() / slots_per_block;
  r.precision = kv::kv_precision_name(shape.layout.base);
  return r;
}

std::vector<std::string> kv_cache_report_lines(const KvCacheReport& r, const std::string& device) {
  return {
      fmt::format("Available KV cache memory: {:.2f} GiB", static_cast<double>(r.memory_bytes) / (1024.0 * 1024.0 * 1024.0)),
      fmt::format("{} KV cache size: {} tokens ({} blocks of {} tokens, {})", device == "cuda" ? "GPU" : "CPU",
                  with_thousands(r.size_tokens), with_thousands(r.num_blocks), r.block_size, r.precision),
      fmt::format("Maximum concurrency for {} tokens per request: {:.2f}x", with_thousands(r.max_model_len),
                  r.max_concurrency),
  };
}

}  // namespace optimate
