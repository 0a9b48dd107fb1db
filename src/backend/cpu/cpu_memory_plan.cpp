#include "backend/cpu/cpu_memory_plan.h"

#include <algorithm>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "core/error.h"

namespace optimate::cpu {

int64_t cpu_kv_bytes_per_block(const ModelConfig& c, int64_t block_size) {
  return 2 * c.num_layers * c.num_kv_heads * c.head_dim * block_size * static_cast<int64_t>(sizeof(float));
}

int64_t cpu_activation_bytes(const ModelConfig& c, int64_t t, int64_t logit_rows, int64_t max_context,
                             int num_threads) {
  const int64_t q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  // The runner's Scratch: x, h, qkv, attn, gate_up, act, rope tables, last.
  const int64_t floats = t * (2 * c.hidden_size + q_dim + 2 * kv_dim + q_dim + 3 * c.intermediate_size + c.head_dim) +
                         logit_rows * c.hidden_size;
  // 8-bit activations of the widest product input: a byte and two lane floats per 4 elements.
  const int64_t q8 = t * std::max(c.hidden_size, c.intermediate_size) * 3;
  // Attention scores per thread, and the logits the caller receives.
  const int64_t scores = int64_t{num_threads} * (c.num_heads / c.num_kv_heads) * max_context;
  const int64_t logits = logit_rows * c.vocab_size;
  return (floats + scores + logits) * static_cast<int64_t>(sizeof(float)) + q8;
}

CpuMemoryPlan plan_cpu_memory(const ModelConfig& c, const CpuMemoryLimits& l, int num_threads) {
  if (l.max_model_len < 1) fail(ErrorCode::kInvalidArgument, "max_model_len must be positive, got {}", l.max_model_len);
  if (l.max_num_seqs < 1) fail(ErrorCode::kInvalidArgument, "max_num_seqs must be positive, got {}", l.max_num_seqs);
  if (l.block_size < 1) fail(ErrorCode::kInvalidArgument, "block_size must be positive, got {}", l.block_size);
  CpuMemoryPlan p;
  const int64_t per_block = l.kv_bytes_per_block > 0 ? l.kv_bytes_per_block : cpu_kv_bytes_per_block(c, l.block_size);
  const int64_t blocks_per_seq = (l.max_model_len + l.block_size - 1) / l.block_size;
  // Products in double: 256 sequences of a 128K context would overflow nothing, but be safe.
  const double needed_blocks = static_cast<double>(blocks_per_seq) * static_cast<double>(l.max_num_seqs);
  p.kv_bytes_needed = static_cast<int64_t>(std::min(needed_blocks * per_block, 9e18));
  int64_t blocks = static_cast<int64_t>(std::min(needed_blocks, 9e18 / per_block));
  if (l.fixed_kv_blocks > 0) {
    blocks = l.fixed_kv_blocks;
    p.fixed = true;
    const double bytes = static_cast<double>(blocks) * static_cast<double>(per_block);
    if ((l.available_bytes > 0 && bytes > static_cast<double>(l.available_bytes)) || bytes > 9e18)
      fail(ErrorCode::kInvalidArgument,
           "--num-kv-blocks {} needs {:.1f} GB of KV cache, more than the {:.1f} GB of memory available", blocks,
           bytes / 1e9, l.available_bytes / 1e9);
  } else if (l.available_bytes > 0) {
    const int64_t cap = static_cast<int64_t>(kKvShareOfAvailable * static_cast<double>(l.available_bytes)) / per_block;
    if (blocks > cap) {
      blocks = cap;
      p.kv_capped = true;
    }
  }
  if (l.fixed_kv_blocks == 0 && blocks < blocks_per_seq)
    fail(ErrorCode::kInvalidArgument,
         "the KV cache for one sequence of max_model_len {} tokens needs {:.1f} MB, more than {:.0f}% of the "
         "{:.1f} MB available; lower --max-model-len or set --kv-cache-memory",
         l.max_model_len, blocks_per_seq * per_block / 1e6, 100 * kKvShareOfAvailable, l.available_bytes / 1e6);
  p.num_kv_blocks = blocks;
  p.kv_bytes = blocks * per_block;
  p.scratch_tokens = std::max<int64_t>(1, l.max_num_batched_tokens);
  if (l.max_step_tokens > 0) p.scratch_tokens = std::min(p.scratch_tokens, l.max_step_tokens);
  p.activation_bytes = cpu_activation_bytes(c, p.scratch_tokens, l.max_num_seqs, l.max_model_len, num_threads);
  p.logit_rows = l.max_num_seqs;
  p.logits_bytes = l.max_num_seqs * c.vocab_size * static_cast<int64_t>(sizeof(float));
  return p;
}

std::string CpuMemoryPlan::describe() const {
  std::string s = fmt::format("KV cache {:.1f} MB reserved ({} blocks{}", kv_bytes / 1e6, num_kv_blocks,
                              fixed ? " as configured" : "");
  if (kv_capped)
    s += fmt::format("; max_num_seqs x max_model_len would need {:.1f} MB, capped at {:.0f}% of available memory",
                     kv_bytes_needed / 1e6, 100 * kKvShareOfAvailable);
  s += fmt::format(", resident only as blocks are written), activations up to {:.1f} MB (scratch for {} tokens at "
                   "once {:.1f} MB, logits of {} sequences {:.1f} MB)",
                   activation_bytes / 1e6, scratch_tokens, (activation_bytes - logits_bytes) / 1e6,
                   logit_rows, logits_bytes / 1e6);
  return s;
}

int64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

}  // namespace optimate::cpu
