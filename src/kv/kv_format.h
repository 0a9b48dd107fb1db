// How one KV cache block is laid out in bytes, for every precision: the contract between the
// block pool (kv/block_pool.h), the CPU runner and the CUDA kernels, which all read and write
// blocks through these rules (the functions here are the CPU twin the GPU kernels are tested
// against).
//
// A runner keeps, per layer, a K arena and a V arena of num_slots * slot_bytes bytes. A block
// takes one slot, or a whole page of slots (kv/block_pool.h); its K values live at
// k_arena + slot * slot_bytes (V likewise), laid out over [kv_heads][block_size][head_dim]:
//
//   full   the runner's own precision, f32 or bf16: values [kvh][bs][hd]
//   fp8    e4m3 codes [kvh][bs][hd] (uint8), then float scale [kvh][bs];
//          x = e4m3(code) * scale, scale = amax / 448 over the token's head row
//   int8   int8 codes [kvh][bs][hd], then float scale [kvh][bs];
//          x = code * scale, scale = amax / 127, code = round-half-even(x / scale) in [-127, 127]
//   int4   uint8 [kvh][bs][hd / 2], element 2i in the low nibble and 2i+1 in the high one, then
//          fp16 (scale, min) pairs; x = code * scale + min with code in [0, 15] and
//          scale = (max - min) / 15 over the pair's elements (asymmetric: keys and values are
//          not centred on zero). Values, and keys by default: a pair per group of kInt4Group
//          elements of a token's row, [kvh][bs][hd / kInt4Group]. Keys of a cache laid out with
//          Int4Keys::kPerChannel (kv_quant's int4_keys = "channel"): a pair per channel over
//          the block's tokens, [kvh][hd] (KIVI: a few channels of every key carry most of its
//          magnitude, so per-token groups spend their 16 levels on those channels).
//
// Every other scale covers one token's row (one head), so writing a token never touches
// another token's codes: those blocks are written token by token like full-precision ones.
// Per-channel int4 keys are written a block at a time (store_block), from full-precision
// blocks whose every token is computed.
//
// Block-table entries carry the block's precision in their top bits, so a kernel needs nothing
// but the table to read a sequence whose blocks mix precisions:
//   entry = code << 28 | slot,  code 0 = full, 1 = fp8, 2 = int8, 3 = int4.
// A cache with only full-precision blocks has entries equal to slot ids.
#pragma once

#include <cstdint>

#include "kv/kv_precision.h"

namespace optimate::kv {

inline constexpr int64_t kInt4Group = 64;   // int4 elements of a token's row per (scale, min) pair
inline constexpr int kEntryCodeShift = 28;
inline constexpr int32_t kEntrySlotMask = (int32_t{1} << kEntryCodeShift) - 1;

// 0 for the runner's full precision (f32 or bf16), 1 fp8, 2 int8, 3 int4.
int32_t precision_code(KvPrecision precision);
KvPrecision precision_of_code(int32_t code, KvPrecision full);
inline int32_t make_entry(int32_t code, int32_t slot) { return (code << kEntryCodeShift) | slot; }
inline int32_t entry_slot(int32_t entry) { return entry & kEntrySlotMask; }
inline int32_t entry_code(int32_t entry) { return entry >> kEntryCodeShift; }

// A full-precision block turned quantized: its values read from from_entry's slot, written at
// to_entry's precision into to_entry's slot (the same slot, or a free one of another page).
struct RequantizeOp {
  int32_t from_entry = 0;
  int32_t to_entry = 0;
};

// How an int4 block's keys are scaled: per token (groups of kInt4Group of a row, written token
// by token) or per channel over the block (written whole). Values are always per token.
enum class Int4Keys : uint8_t { kPerToken, kPerChannel };

// The byte layout of one block's K or V values at one precision.
struct BlockLayout {
  KvPrecision precision = KvPrecision::kF32;
  int64_t num_kv_heads = 0;
  int64_t block_size = 0;
  int64_t head_dim = 0;
  bool channel_scales = false;  // int4 keys scaled per channel (Int4Keys::kPerChannel)
  int64_t row_bytes = 0;    // codes of one token's head row
  int64_t scale_offset = 0; // where the scales start (= kvh * bs * row_bytes)
  int64_t scale_bytes = 0;  // scales of one token's head row (channel_scales: of one head)
  int64_t total_bytes = 0;  // the whole block (one of K or V)

  // A block of values, or of keys scaled as `keys` says (which matters for int4 alone).
  BlockLayout(KvPrecision precision, int64_t num_kv_heads, int64_t block_size, int64_t head_dim,
              Int4Keys keys = Int4Keys::kPerToken);
  // Byte offset of head h, token t's codes and scales inside the block (channel_scales: the
  // head's (scale, min) pairs, one per channel, whatever the token).
  int64_t row_offset(int64_t head, int64_t token) const { return (head * block_size + token) * row_bytes; }
  int64_t scale_row_offset(int64_t head, int64_t token) const {
    return scale_offset + (channel_scales ? head : head * block_size + token) * scale_bytes;
  }
  // Whether a token's row can be written alone (store_row), or only the whole block.
  bool row_writable() const { return !channel_scales; }
};

// Writes one token's head row `x` (head_dim floats) into a block at `layout`'s precision.
// Error(kInternal) for a layout that is written a block at a time (channel_scales).
void store_row(const BlockLayout& layout, uint8_t* block, int64_t head, int64_t token, const float* x);
// Writes a whole block: rows [num_kv_heads][block_size][head_dim] floats.
void store_block(const BlockLayout& layout, uint8_t* block, const float* rows);
// Reads it back as floats (exactly what the GPU kernels compute before the dot products).
void load_row(const BlockLayout& layout, const uint8_t* block, int64_t head, int64_t token, float* out);

// e4m3 (no infinities; 0x7f/0xff are NaN, finite range ±448): round to nearest even,
// saturating to ±448, as CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) does.
uint8_t f32_to_e4m3(float x);
float e4m3_to_f32(uint8_t code);

}  // namespace optimate::kv
