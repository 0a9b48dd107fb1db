#include "backend/cuda/step_inputs.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/kv_block.h"
#include "backend/cuda/prefill_attention.h"
#include "core/error.h"
#include "kv/kv_format.h"

namespace optimate::cuda {

StepLayout::StepLayout(const StepLimits& l) {
  int64_t off = 0;
  auto take = [&](int64_t n) {
    const int64_t at = off;
    off += (n + 3) / 4 * 4;  // 16-byte aligned arrays
    return at;
  };
  token_ids = take(l.max_num_tokens);
  positions = take(l.max_num_tokens);
  slot_mapping = take(l.max_num_tokens);
  rows = take(l.max_num_tokens);
  row_seq = take(l.max_num_tokens);
  row_ctx = take(l.max_num_tokens);
  block_tables = take(l.max_num_seqs * l.max_blocks_per_seq);
  max_tiles = l.max_num_tokens / kPrefillTileRows + l.max_num_seqs;
  tiles = take(max_tiles * 4);
  logits_rows = take(std::max(l.max_num_seqs, l.max_num_tokens));
  total = off;
}

namespace {

// The entry's block must be a precision the cache holds and lie inside the arena.
void check_entry(const StepLimits& limits, int64_t seq, int64_t b, int32_t entry) {
  const int code = kv_entry_code(entry);
  if (entry < 0 || code > kKvInt4 || limits.kv_block_slots[static_cast<size_t>(code)] == 0)
    fail(ErrorCode::kInvalidArgument, "forward: slice {} block {} is entry {:#x}, a precision this KV cache "
         "does not hold", seq, b, static_cast<uint32_t>(entry));
  const int32_t slot = kv_entry_slot(entry);
  if (slot + limits.kv_block_slots[static_cast<size_t>(code)] > limits.num_kv_slots)
    fail(ErrorCode::kInvalidArgument, "forward: slice {} block {} is id {}, outside [0, {})", seq, b, slot,
         limits.num_kv_slots);
}

}  // namespace

std::array<int64_t, 4> kv_block_slots(const kv::KvLayout& layout, int64_t num_kv_heads, int64_t block_size,
                                      int64_t head_dim) {
  std::array<int64_t, 4> slots{};
  for (int code = kKvBf16; code <= kKvInt4; ++code) {
    const kv::KvPrecision p = kv::precision_of_code(code, layout.full);
    if (!layout.holds(p)) continue;
    const int64_t n = layout.slots_for(p);
    if (kv::BlockLayout(p, num_kv_heads, block_size, head_dim).total_bytes <= n * layout.slot_bytes)
      slots[static_cast<size_t>(code)] = n;
  }
  return slots;
}

bool is_uniform_decode(const ForwardBatch& batch) {
  return !batch.seqs.empty() && std::all_of(batch.seqs.begin(), batch.seqs.end(), [](const SeqSlice& s) {
    return s.token_ids.size() == 1 && s.want_logits;
  });
}

StepInputs pack_step(const ForwardBatch& batch, const StepLimits& limits, const StepLayout& layout,
                     int32_t* buf, int64_t pad_to, int64_t fed_back_rows) {
  StepInputs in;
  in.num_seqs = static_cast<int64_t>(batch.seqs.size());
  if (in.num_seqs == 0) fail(ErrorCode::kInvalidArgument, "forward: empty batch");
  if (in.num_seqs > limits.max_num_seqs)
    fail(ErrorCode::kInvalidArgument, "forward: {} sequences exceed max_num_seqs {}", in.num_seqs,
         limits.max_num_seqs);
  int64_t total_tokens = 0;
  for (const SeqSlice& s : batch.seqs) total_tokens += static_cast<int64_t>(s.token_ids.size());
  if (total_tokens > limits.max_num_tokens)
    fail(ErrorCode::kInvalidArgument, "forward: {} tokens exceed max_num_batched_tokens {}",
         total_tokens, limits.max_num_tokens);

  const int64_t bs = limits.block_size;
  int64_t t = 0;
  for (int64_t i = 0; i < in.num_seqs; ++i) {
    const SeqSlice& s = batch.seqs[i];
    const int64_t n = static_cast<int64_t>(s.token_ids.size());
    const int64_t end_pos = s.start_pos + n;
    if (n == 0) fail(ErrorCode::kInvalidArgument, "forward: slice {} has no tokens", i);
    if (s.start_pos < 0 || end_pos > limits.max_model_len)
      fail(ErrorCode::kInvalidArgument, "forward: slice {} covers positions [{}, {}) beyond max_model_len {}",
           i, s.start_pos, end_pos, limits.max_model_len);
    const int64_t blocks_needed = (end_pos + bs - 1) / bs;
    const int64_t table_len = static_cast<int64_t>(s.block_table.size());
    if (table_len < blocks_needed || table_len > limits.max_blocks_per_seq)
      fail(ErrorCode::kInvalidArgument,
           "forward: slice {} has a block table of {} blocks; positions up to {} need {} (at most {})",
           i, table_len, end_pos, blocks_needed, limits.max_blocks_per_seq);
    int32_t* table = buf + layout.block_tables + i * limits.max_blocks_per_seq;
    for (int64_t b = 0; b < blocks_needed; ++b) {
      check_entry(limits, i, b, s.block_table[b]);
      table[b] = s.block_table[b];
    }
    const bool tiled = n > 1 && limits.tensor_core_prefill;
    for (int64_t j = 0; j < n; ++j, ++t) {
      const int32_t tok = s.token_ids[j];
      const int64_t fed_back = last_launch_row(tok);
      if (fed_back >= 0 && fed_back < fed_back_rows) {
        ++in.num_fed_back;
      } else if (tok < 0 || tok >= limits.vocab_size) {
        if (fed_back >= 0 && fed_back_rows > 0)
          fail(ErrorCode::kInvalidArgument, "forward: slice {} token {} takes row {} of the last launch, which "
               "draws {}", i, j, fed_back, fed_back_rows);
        fail(ErrorCode::kInvalidArgument, "forward: slice {} token {} is {}, outside the vocabulary of {}",
             i, j, tok, limits.vocab_size);
      }
      const int64_t pos = s.start_pos + j;
      buf[layout.token_ids + t] = tok;
      buf[layout.positions + t] = static_cast<int32_t>(pos);
      const int32_t entry = table[pos / bs];
      buf[layout.slot_mapping + t] = kv_write_target(kv_entry_code(entry), kv_entry_slot(entry),
                                                     static_cast<int>(bs), static_cast<int>(pos % bs));
      if (!tiled) {
        buf[layout.rows + in.num_rows] = static_cast<int32_t>(t);
        buf[layout.row_seq + in.num_rows] = static_cast<int32_t>(i);
        buf[layout.row_ctx + in.num_rows] = static_cast<int32_t>(pos + 1);
        ++in.num_rows;
      }
    }
    if (tiled) {
      for (int64_t j = 0; j < n; j += kPrefillTileRows) {
        int32_t* tile = buf + layout.tiles + 4 * in.num_tiles++;
        tile[0] = static_cast<int32_t>(t - n + j);
        tile[1] = static_cast<int32_t>(std::min<int64_t>(kPrefillTileRows, n - j));
        tile[2] = static_cast<int32_t>(s.start_pos + j);
        tile[3] = static_cast<int32_t>(i);
      }
    }
    if (s.all_logits)
      for (int64_t j = n; j > 0; --j) buf[layout.logits_rows + in.num_logits_rows++] = static_cast<int32_t>(t - j);
    else if (s.want_logits)
      buf[layout.logits_rows + in.num_logits_rows++] = static_cast<int32_t>(t - 1);
    in.max_ctx = std::max(in.max_ctx, end_pos);
  }
  in.num_tokens = t;

  if (pad_to > in.num_seqs) {
    OPTIMATE_CHECK(in.num_tokens == in.num_seqs && in.num_rows == in.num_seqs && pad_to <= limits.max_num_seqs,
                   "padding applies to uniform decode batches ({} tokens, {} seqs, pad {})",
                   in.num_tokens, in.num_seqs, pad_to);
    for (int64_t r = in.num_seqs; r < pad_to; ++r) {
      buf[layout.token_ids + r] = 0;
      buf[layout.positions + r] = 0;
      buf[layout.slot_mapping + r] = -1;
      buf[layout.rows + r] = static_cast<int32_t>(r);
      buf[layout.row_seq + r] = static_cast<int32_t>(r);
      buf[layout.row_ctx + r] = 0;
      buf[layout.logits_rows + r] = static_cast<int32_t>(r);
    }
    in.num_tokens = in.num_rows = in.num_logits_rows = pad_to;
  }

  const int64_t mb = limits.max_blocks_per_seq;
  in.used = {{layout.token_ids, in.num_tokens},   {layout.positions, in.num_tokens},
             {layout.slot_mapping, in.num_tokens}, {layout.rows, in.num_rows},
             {layout.row_seq, in.num_rows},        {layout.row_ctx, in.num_rows},
             {layout.block_tables, in.num_seqs * mb}, {layout.tiles, in.num_tiles * 4},
             {layout.logits_rows, in.num_logits_rows}};
  return in;
}

}  // namespace optimate::cuda
