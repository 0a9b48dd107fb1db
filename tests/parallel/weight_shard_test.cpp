#include "parallel/weight_shard.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace optimate::parallel {
namespace {

// A [rows, cols] Q8_0 tensor whose element (r, c) is (r * cols + c) % 97 - 48 times a per-block
// scale of 1/64: exact in fp32, so slices compare with ==.
HostTensor q8_tensor(int64_t rows, int64_t cols) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(dtype_row_bytes(DType::kQ8_0, rows * cols));
  uint8_t* p = bytes->data();
  for (int64_t i = 0; i < rows * cols; i += 32, p += 34) {
    const uint16_t d = f32_to_f16(1.0f / 64.0f);
    std::memcpy(p, &d, 2);
    for (int j = 0; j < 32; ++j) p[2 + j] = static_cast<uint8_t>(static_cast<int8_t>((i + j) % 97 - 48));
  }
  HostTensor t;
  t.name = "w";
  t.dtype = DType::kQ8_0;
  t.shape = {rows, cols};
  t.data = {bytes->data(), bytes->size()};
  t.owner = bytes;
  return t;
}

float element(int64_t r, int64_t c, int64_t cols) { return static_cast<float>((r * cols + c) % 97 - 48) / 64.0f; }

TEST(WeightShard, RowsAreAViewOfTheSameBlocks) {
  const HostTensor t = q8_tensor(8, 64);
  const HostTensor s = slice_rows(t, 2, 3);
  EXPECT_EQ(s.dtype, DType::kQ8_0);
  EXPECT_EQ(s.shape, (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(s.data.data(), t.data.data() + 2 * 68);
  const std::vector<float> v = to_f32(s);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 64; ++c) ASSERT_EQ(v[r * 64 + c], element(r + 2, c, 64));
}

TEST(WeightShard, ColumnsOnWholeBlocksStayQuantizedAndOthersWiden) {
  const HostTensor t = q8_tensor(4, 128);
  const HostTensor whole = slice_cols(t, 64, 32);
  EXPECT_EQ(whole.dtype, DType::kQ8_0);
  const HostTensor cut = slice_cols(t, 48, 32);  // starts inside a block
  EXPECT_EQ(cut.dtype, DType::kF32);
  const std::vector<float> a = to_f32(whole), b = to_f32(cut);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 32; ++c) {
      ASSERT_EQ(a[r * 32 + c], element(r, 64 + c, 128));
      ASSERT_EQ(b[r * 32 + c], element(r, 48 + c, 128));
    }
}

TEST(WeightShard, OutOfRangeSlicesAreErrorsNamingTheTensor) {
  const HostTensor t = q8_tensor(4, 64);
  EXPECT_THROW(slice_rows(t, 3, 2), Error);
  try {
    slice_cols(t, 32, 64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
  }
}

TEST(WeightShard, EachRankGetsItsHeadsItsFeaturesAndItsVocabulary) {
  ModelConfig c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.hidden_size = 64;
  c.intermediate_size = 64;
  c.vocab_size = 7;
  auto f32 = [](std::string name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
    return make_f32_tensor(std::move(name), std::move(shape), std::move(v));
  };
  ModelWeights w;
  w.tok_embeddings = f32("emb", {7, 64});
  w.lm_head = w.tok_embeddings;
  w.final_norm = f32("norm", {64});
  LayerWeights l;
  l.attn_norm = l.ffn_norm = w.final_norm;
  l.wq = f32("wq", {64, 64});
  l.wk = l.wv = f32("wk", {32, 64});
  l.wo = f32("wo", {64, 64});
  l.w_gate = l.w_up = f32("wg", {64, 64});
  l.w_down = f32("wd", {64, 64});
  w.layers.push_back(l);
  const TpPartition p = plan_tp_partition(c, 2);
  const ModelWeights r1 = shard_weights(c, w, p, 1);
  EXPECT_EQ(r1.tok_embeddings.shape, (std::vector<int64_t>{3, 64}));  // tokens 4..6
  EXPECT_EQ(to_f32(r1.tok_embeddings)[0], 4 * 64);
  EXPECT_EQ(r1.lm_head.data.data(), r1.tok_embeddings.data.data());  // still tied
  EXPECT_EQ(to_f32(r1.layers[0].wq)[0], 32 * 64);  // heads 2 and 3
  EXPECT_EQ(r1.layers[0].wk.shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(to_f32(r1.layers[0].wk)[0], 16 * 64);  // KV head 1
  EXPECT_EQ(r1.layers[0].wo.shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(to_f32(r1.layers[0].wo)[0], 32);  // input columns 32..63
  EXPECT_EQ(to_f32(r1.layers[0].w_down)[33], 64 + 33);
}

}  // namespace
}  // namespace optimate::parallel
