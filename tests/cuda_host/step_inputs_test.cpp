// The CUDA runner's host side: how a step's slices become the kernels' work lists (prefill
// tiles, single-query rows, KV write targets with their blocks' precisions, logits rows, all
// of a slice's rows, graph padding), which bad batches are refused before anything reaches the
// GPU, the blocks each KV layout can hold, and the decode split choice. Pure host code, so CI
// runs it without a GPU.
#include "backend/cuda/step_inputs.h"

#include <gtest/gtest.h>

#include <array>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/kv_block.h"
#include "backend/cuda/paged_attention.h"
#include "backend/cuda/paged_attention_heads.h"
#include "backend/cuda/prefill_attention.h"
#include "core/error.h"
#include "kv/kv_format.h"
#include "kv/kv_layout.h"

namespace optimate::cuda {
namespace {

using kv::KvPrecision;

// A bf16 cache of 256 one-slot blocks (8 KV heads, head_dim 128).
StepLimits limits() {
  StepLimits l;
  l.max_num_tokens = 1024;
  l.max_num_seqs = 8;
  l.max_blocks_per_seq = 32;
  l.block_size = 16;
  l.num_kv_slots = 256;
  l.kv_block_slots = kv_block_slots(kv::plan_kv_layout(KvPrecision::kBF16, KvPrecision::kBF16, std::nullopt, 8, 16, 128),
                                    8, 16, 128);
  l.vocab_size = 1000;
  l.max_model_len = 512;
  return l;
}

// The same with a dynamic cache down to `finest`.
StepLimits dynamic_limits(KvPrecision finest) {
  StepLimits l = limits();
  l.kv_block_slots =
      kv_block_slots(kv::plan_kv_layout(KvPrecision::kBF16, KvPrecision::kBF16, finest, 8, 16, 128), 8, 16, 128);
  return l;
}

struct Packed {
  StepLayout layout;
  std::vector<int32_t> buf;
  StepInputs in;
  int32_t at(int64_t offset, int64_t i) const { return buf[static_cast<size_t>(offset + i)]; }
  std::array<int32_t, 4> tile(int64_t i) const {
    return {at(layout.tiles, 4 * i), at(layout.tiles, 4 * i + 1), at(layout.tiles, 4 * i + 2),
            at(layout.tiles, 4 * i + 3)};
  }
};

Packed pack(const ForwardBatch& batch, const StepLimits& l, int64_t pad_to = 0, int64_t fed_back_rows = 0) {
  Packed p{StepLayout(l), {}, {}};
  p.buf.assign(static_cast<size_t>(p.layout.total), -7);
  p.in = pack_step(batch, l, p.layout, p.buf.data(), pad_to, fed_back_rows);
  return p;
}

std::vector<int32_t> iota_ids(int64_t n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// A 300-token prompt chunk that starts after 5 cached tokens, next to one decode token: the
// chunk becomes three causal tiles of kPrefillTileRows rows (the last partial), the decode
// token one attention row; KV slots follow the block tables.
TEST(StepInputs, PrefillChunkBecomesTilesAndDecodeTokenARow) {
  static_assert(kPrefillTileRows == 128);
  const StepLimits l = limits();
  const std::vector<int32_t> prompt = iota_ids(300, 1), one = {42};
  const std::vector<int32_t> table_a = iota_ids(20, 100), table_b = {7, 3, 9};
  const ForwardBatch batch{{SeqSlice{prompt, 5, table_a, true}, SeqSlice{one, 40, table_b, true}}};
  const Packed p = pack(batch, l);
  EXPECT_EQ(p.in.num_seqs, 2);
  EXPECT_EQ(p.in.num_tokens, 301);
  EXPECT_EQ(p.in.num_tiles, 3);
  EXPECT_EQ(p.tile(0), (std::array<int32_t, 4>{0, 128, 5, 0}));
  EXPECT_EQ(p.tile(1), (std::array<int32_t, 4>{128, 128, 133, 0}));
  EXPECT_EQ(p.tile(2), (std::array<int32_t, 4>{256, 44, 261, 0}));
  EXPECT_EQ(p.in.num_rows, 1);
  EXPECT_EQ(p.at(p.layout.rows, 0), 300);
  EXPECT_EQ(p.at(p.layout.row_seq, 0), 1);
  EXPECT_EQ(p.at(p.layout.row_ctx, 0), 41);  // positions 0..40
  EXPECT_EQ(p.in.max_ctx, 305);
  // Token 17 of the chunk sits at position 22: block 1 of table_a (id 101), offset 6.
  EXPECT_EQ(p.at(p.layout.token_ids, 17), 18);
  EXPECT_EQ(p.at(p.layout.positions, 17), 22);
  EXPECT_EQ(p.at(p.layout.slot_mapping, 17), 101 * 16 + 6);
  // The decode token at position 40: block 2 of table_b (id 9), offset 8.
  EXPECT_EQ(p.at(p.layout.slot_mapping, 300), 9 * 16 + 8);
  EXPECT_EQ(p.in.num_logits_rows, 2);
  EXPECT_EQ(p.at(p.layout.logits_rows, 0), 299);
  EXPECT_EQ(p.at(p.layout.logits_rows, 1), 300);
  // The block tables the kernels read, row per slice.
  EXPECT_EQ(p.at(p.layout.block_tables, 19), 119);
  EXPECT_EQ(p.at(p.layout.block_tables, l.max_blocks_per_seq + 2), 9);
  // The copy to the device covers what was written.
  bool tiles_copied = false;
  for (const auto& [offset, count] : p.in.used) tiles_copied |= offset == p.layout.tiles && count == 12;
  EXPECT_TRUE(tiles_copied);
}

TEST(StepInputs, WithoutTensorCorePrefillEveryChunkTokenIsARow) {
  StepLimits l = limits();
  l.tensor_core_prefill = false;
  const std::vector<int32_t> prompt = iota_ids(20, 1);
  const std::vector<int32_t> table = {4, 5};
  const Packed p = pack(ForwardBatch{{SeqSlice{prompt, 3, table, false}}}, l);
  EXPECT_EQ(p.in.num_tiles, 0);
  EXPECT_EQ(p.in.num_rows, 20);
  EXPECT_EQ(p.in.num_logits_rows, 0);
  for (int64_t j = 0; j < 20; ++j) EXPECT_EQ(p.at(p.layout.row_ctx, j), 3 + j + 1) << j;
}

// A captured graph of 4 rows replays a batch of 3: the padding row writes no KV, attends to
// nothing, and its logits row is ignored by the caller.
TEST(StepInputs, UniformDecodePadsToTheGraphBatch) {
  const StepLimits l = limits();
  const std::vector<int32_t> a = {1}, b = {2}, c = {3}, table = {0, 1, 2};
  const ForwardBatch batch{{SeqSlice{a, 10, table, true}, SeqSlice{b, 20, table, true},
                            SeqSlice{c, 30, table, true}}};
  ASSERT_TRUE(is_uniform_decode(batch));
  const Packed p = pack(batch, l, 4);
  EXPECT_EQ(p.in.num_seqs, 3);
  EXPECT_EQ(p.in.num_tokens, 4);
  EXPECT_EQ(p.in.num_rows, 4);
  EXPECT_EQ(p.in.num_logits_rows, 4);
  EXPECT_EQ(p.at(p.layout.slot_mapping, 3), -1);
  EXPECT_EQ(p.at(p.layout.row_ctx, 3), 0);
  EXPECT_EQ(p.at(p.layout.row_ctx, 2), 31);
  // Padding applies only to uniform decode batches.
  const std::vector<int32_t> two = {1, 2};
  EXPECT_FALSE(is_uniform_decode(ForwardBatch{{SeqSlice{two, 0, table, true}}}));
  EXPECT_THROW(pack(ForwardBatch{{SeqSlice{two, 0, table, true}}}, l, 4), Error);
}

// Every bad batch is an InvalidArgument naming the slice, before anything reaches the GPU.
TEST(StepInputs, BadBatchesAreRefusedWithTheSliceNamed) {
  const StepLimits l = limits();
  const std::vector<int32_t> ok = {5, 6}, bad_token = {5, 1000}, negative = {-1};
  const std::vector<int32_t> table = {0, 1}, short_table = {}, bad_block = {0, 256};
  const std::vector<int32_t> long_prompt = iota_ids(1025, 0), one = {1};
  const std::vector<int32_t> int8_table = {kv::make_entry(2, 5)};
  struct Case {
    std::string name;
    ForwardBatch batch;
    std::string expected;
  };
  std::vector<SeqSlice> nine(9, SeqSlice{one, 0, table, true});
  const std::vector<Case> cases = {
      {"empty batch", ForwardBatch{}, "empty batch"},
      {"token outside the vocabulary", ForwardBatch{{SeqSlice{ok, 0, table, true}, SeqSlice{bad_token, 0, table, true}}},
       "slice 1 token 1 is 1000"},
      {"negative token", ForwardBatch{{SeqSlice{negative, 0, table, true}}}, "slice 0 token 0 is -1"},
      {"past max_model_len", ForwardBatch{{SeqSlice{ok, 511, table, true}}}, "beyond max_model_len 512"},
      {"negative position", ForwardBatch{{SeqSlice{ok, -1, table, true}}}, "slice 0 covers positions [-1"},
      {"block table too short", ForwardBatch{{SeqSlice{ok, 31, table, true}}}, "slice 0 has a block table of 2 blocks; positions up to 33 need 3"},
      {"no block table", ForwardBatch{{SeqSlice{ok, 0, short_table, true}}}, "block table of 0 blocks"},
      {"block id outside the cache", ForwardBatch{{SeqSlice{ok, 16, bad_block, true}}}, "slice 0 block 1 is id 256"},
      {"a precision the cache does not hold", ForwardBatch{{SeqSlice{ok, 0, int8_table, true}}},
       "slice 0 block 0 is entry 0x20000005"},
      {"a negative entry", ForwardBatch{{SeqSlice{ok, 0, negative, true}}}, "slice 0 block 0 is entry 0xffffffff"},
      {"empty slice", ForwardBatch{{SeqSlice{short_table, 0, table, true}}}, "slice 0 has no tokens"},
      {"too many sequences", ForwardBatch{nine}, "9 sequences exceed max_num_seqs 8"},
      {"too many tokens", ForwardBatch{{SeqSlice{long_prompt, 0, table, true}}}, "1025 tokens exceed"},
  };
  for (const Case& c : cases) {
    try {
      pack(c.batch, l);
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << c.name;
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << c.name << ": " << e.what();
    }
  }
}

// A token the last launch drew (token_from_last_launch) is packed as is, for the device to fill
// in; one naming a row that launch did not draw is refused.
TEST(StepInputs, FedBackTokensArePackedForTheDevice) {
  const StepLimits l = limits();
  const std::vector<int32_t> table = {0, 1};
  const std::vector<int32_t> a = {token_from_last_launch(1)}, b = {7}, c = {token_from_last_launch(0)};
  const Packed p = pack(ForwardBatch{{SeqSlice{a, 3, table, true}, SeqSlice{b, 4, table, true}, SeqSlice{c, 5, table, true}}},
                        l, 0, /*fed_back_rows=*/2);
  EXPECT_EQ(p.in.num_fed_back, 2);
  EXPECT_EQ(p.at(p.layout.token_ids, 0), token_from_last_launch(1));
  EXPECT_EQ(p.at(p.layout.token_ids, 1), 7);
  EXPECT_EQ(p.at(p.layout.token_ids, 2), token_from_last_launch(0));
  try {
    pack(ForwardBatch{{SeqSlice{a, 3, table, true}}}, l, 0, /*fed_back_rows=*/1);
    ADD_FAILURE() << "a row the last launch did not draw was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slice 0 token 0 takes row 1 of the last launch, which draws 1"),
              std::string::npos) << e.what();
  }
}

// The worst case the layout reserves tiles for: every sequence one token past a tile boundary.
TEST(StepInputs, LayoutHoldsTheMostTilesABatchCanNeed) {
  StepLimits l = limits();
  l.max_num_tokens = 8 * (kPrefillTileRows + 1);
  l.max_model_len = 4096;
  const std::vector<int32_t> prompt = iota_ids(kPrefillTileRows + 1, 0);
  const std::vector<int32_t> table = iota_ids(32, 0);
  ForwardBatch batch;
  for (int i = 0; i < 8; ++i) batch.seqs.push_back(SeqSlice{prompt, 0, table, true});
  const Packed p = pack(batch, l);
  EXPECT_EQ(p.in.num_tiles, 16);
  EXPECT_LE(p.in.num_tiles, p.layout.max_tiles);
  EXPECT_EQ(p.tile(15), (std::array<int32_t, 4>{static_cast<int32_t>(8 * (kPrefillTileRows + 1) - 1), 1,
                                                 kPrefillTileRows, 7}));
}

// Entries carry their block's precision to the kernels: write targets keep the code bits above
// slot * block_size + token, and block tables are copied as they come.
TEST(StepInputs, EntriesCarryTheirPrecisionToWriteTargetsAndTables) {
  const StepLimits l = dynamic_limits(KvPrecision::kInt4);
  const std::vector<int32_t> prompt = iota_ids(40, 1), one = {9};
  // Blocks: int8 at slot 10, bf16 at slot 20 (a page of 4), int4 at slot 7.
  const std::vector<int32_t> table = {kv::make_entry(2, 10), kv::make_entry(0, 20), kv::make_entry(3, 7)};
  const std::vector<int32_t> fp8 = {kv::make_entry(1, 30)};
  const Packed p = pack(ForwardBatch{{SeqSlice{prompt, 0, table, true}, SeqSlice{one, 3, fp8, true}}}, l);
  const int32_t at_5 = p.at(p.layout.slot_mapping, 5), at_20 = p.at(p.layout.slot_mapping, 20);
  const int32_t at_33 = p.at(p.layout.slot_mapping, 33), decode = p.at(p.layout.slot_mapping, 40);
  EXPECT_EQ(kv_target_code(at_5), 2);
  EXPECT_EQ(kv_target_row(at_5), 10 * 16 + 5);
  EXPECT_EQ(at_20, 20 * 16 + 4);  // bf16: the plain row, as a bf16-only cache has it
  EXPECT_EQ(kv_target_code(at_33), 3);
  EXPECT_EQ(kv_target_row(at_33), 7 * 16 + 1);
  EXPECT_EQ(kv_target_code(decode), 1);
  EXPECT_EQ(kv_target_row(decode), 30 * 16 + 3);
  EXPECT_EQ(p.at(p.layout.block_tables, 0), table[0]);
  EXPECT_EQ(p.at(p.layout.block_tables, 2), table[2]);
  EXPECT_EQ(p.at(p.layout.block_tables, l.max_blocks_per_seq), fp8[0]);
  // A bf16 block spans a page: one starting in the arena's last three slots is refused.
  const std::vector<int32_t> late = {kv::make_entry(0, 253)}, late_int4 = {kv::make_entry(3, 255)};
  EXPECT_THROW(pack(ForwardBatch{{SeqSlice{one, 0, late, true}}}, l), Error);
  EXPECT_NO_THROW(pack(ForwardBatch{{SeqSlice{one, 0, late_int4, true}}}, l));
  // int4 is finer than an int8-finest layout holds.
  EXPECT_THROW(pack(ForwardBatch{{SeqSlice{one, 0, late_int4, true}}}, dynamic_limits(KvPrecision::kInt8)), Error);
}

// A slice with all_logits gives a logits row per token, in order, among the other slices'.
TEST(StepInputs, AllLogitsSliceGivesEveryTokensRowInOrder) {
  const StepLimits l = limits();
  const std::vector<int32_t> a = iota_ids(20, 1), b = iota_ids(5, 1), table = {0, 1};
  SeqSlice all{a, 0, table, true};
  all.all_logits = true;
  const Packed p = pack(ForwardBatch{{SeqSlice{b, 0, table, true}, all, SeqSlice{b, 0, table, false}}}, l);
  ASSERT_EQ(p.in.num_logits_rows, 21);
  EXPECT_EQ(p.at(p.layout.logits_rows, 0), 4);
  for (int64_t j = 0; j < 20; ++j) EXPECT_EQ(p.at(p.layout.logits_rows, 1 + j), 5 + j) << j;
  // More rows than max_num_seqs fit the layout: it reserves one per token.
  EXPECT_GE(p.layout.total - p.layout.logits_rows, l.max_num_tokens);
}

// Which blocks each layout holds and how many slots they span: a static cache holds its own
// precision in one slot (a bf16 block does not fit an int8 cache's slot); a dynamic one bf16
// in a page and every precision down to its finest.
TEST(KvBlockSlots, EachLayoutHoldsTheBlocksThatFit) {
  auto slots = [](KvPrecision base, std::optional<KvPrecision> finest) {
    return kv_block_slots(kv::plan_kv_layout(KvPrecision::kBF16, base, finest, 8, 16, 128), 8, 16, 128);
  };
  using A = std::array<int64_t, 4>;  // bf16, fp8, int8, int4
  EXPECT_EQ(slots(KvPrecision::kBF16, std::nullopt), (A{1, 0, 0, 0}));
  EXPECT_EQ(slots(KvPrecision::kInt8, std::nullopt), (A{0, 0, 1, 0}));
  EXPECT_EQ(slots(KvPrecision::kInt4, std::nullopt), (A{0, 0, 0, 1}));
  EXPECT_EQ(slots(KvPrecision::kBF16, KvPrecision::kInt8), (A{2, 1, 1, 0}));
  EXPECT_EQ(slots(KvPrecision::kBF16, KvPrecision::kFP8), (A{2, 1, 1, 0}));
  EXPECT_EQ(slots(KvPrecision::kBF16, KvPrecision::kInt4), (A{4, 2, 2, 1}));
}

const DecodeAttentionShape kLlama3{32, 8, 128, 16, DecodeAttentionKernel::kAuto};

TEST(DecodeSplits, KernelChoiceFollowsTheGqaShapeAndBlockSize) {
  EXPECT_EQ(resolve_decode_kernel(DecodeAttentionKernel::kAuto, 32, 8, 16), DecodeAttentionKernel::kTensorCores);
  EXPECT_EQ(resolve_decode_kernel(DecodeAttentionKernel::kAuto, 32, 8, 32), DecodeAttentionKernel::kTensorCores);
  EXPECT_EQ(resolve_decode_kernel(DecodeAttentionKernel::kAuto, 32, 32, 16), DecodeAttentionKernel::kCudaCores);  // MHA
  EXPECT_EQ(resolve_decode_kernel(DecodeAttentionKernel::kAuto, 32, 8, 8), DecodeAttentionKernel::kCudaCores);
  EXPECT_EQ(resolve_decode_kernel(DecodeAttentionKernel::kAuto, 32, 2, 16), DecodeAttentionKernel::kCudaCores);  // group 16
  EXPECT_EQ(resolve_decode_kernel(DecodeAttentionKernel::kCudaCores, 32, 8, 16), DecodeAttentionKernel::kCudaCores);
}

// Llama-3-8B on 132 SMs: while rows x kv heads is at most half the SMs, kAuto runs one cluster
// per (row, kv head), of as many blocks as keep them within half the SMs, and one block per
// (row, kv head) up to 4 an SM (66 rows), where the GPU runs clusters (the Hopper path); past
// that, and on the portable path, the split tensor-core kernel serves them.
TEST(DecodeSplits, FewRowsTakeOneClusterPerKvHead) {
  using K = DecodeAttentionKernel;
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kAuto, 1, 32, 8, 16, 132, true), K::kHeadClusters);
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kAuto, 8, 32, 8, 16, 132, true), K::kHeadClusters);
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kAuto, 9, 32, 8, 16, 132, true), K::kHeadClusters);
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kAuto, 64, 32, 8, 16, 132, true), K::kHeadClusters);
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kAuto, 66, 32, 8, 16, 132, true), K::kHeadClusters);
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kAuto, 67, 32, 8, 16, 132, true), K::kTensorCores);
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kAuto, 128, 32, 8, 16, 132, true), K::kTensorCores);
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kAuto, 64, 32, 8, 16, 132, false), K::kTensorCores);
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kTensorCores, 1, 32, 8, 16, 132, true), K::kTensorCores);  // on request
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kAuto, 1, 32, 8, 8, 132, true), K::kCudaCores);    // block size 8
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kAuto, 1, 32, 32, 16, 132, true), K::kCudaCores);  // MHA
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kAuto, 1, 32, 8, 16, 132, false), K::kTensorCores);
  EXPECT_EQ(resolve_decode_kernel_for_rows(K::kAuto, 8, 32, 8, 16, 108, false), K::kTensorCores);  // A100's SMs
  EXPECT_EQ(paged_attention_head_cluster_size(1, 8, 132), 8);
  EXPECT_EQ(paged_attention_head_cluster_size(2, 8, 132), 4);
  EXPECT_EQ(paged_attention_head_cluster_size(4, 8, 132), 2);
  EXPECT_EQ(paged_attention_head_cluster_size(8, 8, 132), 1);
  EXPECT_EQ(paged_attention_head_cluster_size(9, 8, 132), 1);   // one block per (row, kv head)
  EXPECT_EQ(paged_attention_head_cluster_size(66, 8, 132), 1);  // 4 an SM
  EXPECT_EQ(paged_attention_head_cluster_size(67, 8, 132), 0);
  EXPECT_EQ(paged_attention_head_cluster_size(1, 1, 132), 8);  // at most 8, the portable size
}

// Few rows split their keys to fill the SMs, never below 32 keys a split nor past 64 splits, and
// past one wave only at 512 keys a split or more;
// many rows do not split; the workspace sized once covers every case that splits.
TEST(DecodeSplits, SplitsFillTheGpuOnlyWhenRowsAreFew) {
  EXPECT_EQ(paged_attention_num_splits(1, kLlama3, 300, 132), 10);     // 300 keys: 10 splits of 32
  EXPECT_EQ(paged_attention_num_splits(1, kLlama3, 8192, 132), 64);    // capped
  EXPECT_EQ(paged_attention_num_splits(1, kLlama3, 20, 132), 1);       // one split's worth of keys
  EXPECT_EQ(paged_attention_num_splits(1024, kLlama3, 8192, 132), 1);  // the rows fill the GPU
  const int64_t rows = paged_attention_split_rows(kLlama3, 132);
  EXPECT_EQ(paged_attention_num_splits(rows, kLlama3, 1 << 20, 132), 1);
  const int64_t reserved = paged_attention_split_workspace_floats(kLlama3, 132);
  for (int64_t r = 1; r < rows; ++r) {
    const int s = paged_attention_num_splits(r, kLlama3, 1 << 20, 132);
    EXPECT_GE(s, 1);
    EXPECT_LE(paged_attention_workspace_floats(r, kLlama3.num_heads, s, kLlama3.head_dim), reserved) << r;
  }
  // 512 (row, kv head) warps: 3 splits reach 1056, 5 of 512 keys or more reach 2112.
  EXPECT_EQ(paged_attention_num_splits(64, kLlama3, 1 << 20, 132), 5);
  EXPECT_EQ(paged_attention_num_splits(64, kLlama3, 1024, 132), 3);  // 2 splits of 512 keys: the wave wins
  // A cache that may hold quantized blocks aims at four times the warps, and reserves for it.
  DecodeAttentionShape quantized = kLlama3;
  quantized.quantized_kv = true;
  EXPECT_EQ(paged_attention_num_splits(64, quantized, 1 << 20, 132), 9);     // 4224 warps
  EXPECT_EQ(paged_attention_num_splits(1024, quantized, 8192, 132), 1);      // 8192 warps already
  EXPECT_EQ(paged_attention_num_splits(256, quantized, 8192, 132), 3);
  EXPECT_EQ(paged_attention_num_splits(8, quantized, 8192, 132), 17);  // not 66 splits of 124 keys
  const int64_t quantized_rows = paged_attention_split_rows(quantized, 132);
  EXPECT_EQ(paged_attention_num_splits(quantized_rows, quantized, 1 << 20, 132), 1);
  for (int64_t r = 1; r < quantized_rows; ++r)
    EXPECT_LE(paged_attention_workspace_floats(r, 32, paged_attention_num_splits(r, quantized, 1 << 20, 132), 128),
              paged_attention_split_workspace_floats(quantized, 132)) << r;
  // The tensor-core kernel's cap for a short row when it combines in the launch: one split per
  // 32 keys.
  EXPECT_EQ(paged_attention_tc_row_splits(16, 300), 10);
  EXPECT_EQ(paged_attention_tc_row_splits(16, 32), 1);
  EXPECT_EQ(paged_attention_tc_row_splits(16, 33), 2);
  EXPECT_EQ(paged_attention_tc_row_splits(8, 4096), 8);
  EXPECT_EQ(paged_attention_tc_row_splits(8, 0), 1);
}

}  // namespace
}  // namespace optimate::cuda
