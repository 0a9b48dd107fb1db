#include "parallel/tp_partition.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace optimate::parallel {
namespace {

ModelConfig config(int64_t heads, int64_t kv_heads, int64_t intermediate, int64_t vocab) {
  ModelConfig c;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  c.hidden_size = heads * 64;
  c.head_dim = 64;
  return c;
}

std::string error_of(const ModelConfig& c, int64_t n) {
  try {
    plan_tp_partition(c, n);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(TpPartition, SplitsHeadsKvHeadsAndIntermediateEvenlyAndTheVocabularyByCeiling) {
  const TpPartition p = plan_tp_partition(config(32, 8, 14336, 128256), 4);  // Llama-3-8B
  EXPECT_EQ(p.heads_per_rank, 8);
  EXPECT_EQ(p.kv_heads_per_rank, 2);
  EXPECT_EQ(p.intermediate_per_rank, 3584);
  EXPECT_EQ(p.vocab_per_rank, 32064);
  EXPECT_EQ(p.vocab_begin(3), 96192);
  EXPECT_EQ(p.vocab_end(3), 128256);

  const TpPartition odd = plan_tp_partition(config(8, 4, 128, 101), 4);
  EXPECT_EQ(odd.vocab_per_rank, 26);
  EXPECT_EQ(odd.vocab_end(2), 78);
  EXPECT_EQ(odd.vocab_end(3) - odd.vocab_begin(3), 23);  // the last slice is short

  const ModelConfig rank = rank_model_config(config(32, 8, 14336, 128256), p);
  EXPECT_EQ(rank.num_heads, 8);
  EXPECT_EQ(rank.num_kv_heads, 2);
  EXPECT_EQ(rank.vocab_size, 128256);  // token ids stay global
  EXPECT_EQ(rank.hidden_size, 32 * 64);
}

TEST(TpPartition, OneRankIsTheWholeModel) {
  const TpPartition p = plan_tp_partition(config(9, 3, 1536, 49152), 1);
  EXPECT_EQ(p.heads_per_rank, 9);
  EXPECT_EQ(p.vocab_end(0), 49152);
}

TEST(TpPartition, SizesThatDoNotSplitTheModelSayWhatDoes) {
  const ModelConfig smollm2 = config(9, 3, 1536, 49152);
  const std::string two = error_of(smollm2, 2);
  EXPECT_NE(two.find("9 attention heads"), std::string::npos) << two;
  EXPECT_NE(two.find("sizes that split this model: 1, 3"), std::string::npos) << two;
  EXPECT_NE(error_of(config(8, 2, 128, 100), 4).find("2 KV heads"), std::string::npos);
  EXPECT_NE(error_of(config(8, 8, 100, 100), 8).find("100 MLP intermediate"), std::string::npos);
  EXPECT_NE(error_of(config(8, 8, 128, 5), 4).find("too small"), std::string::npos);
  EXPECT_NE(error_of(smollm2, 0).find("at least 1"), std::string::npos);
  EXPECT_NE(error_of(smollm2, -2).find("at least 1"), std::string::npos);
}

}  // namespace
}  // namespace optimate::parallel
