// The CUDA runner with quantized KV caches against the fp32 CPU twin whose keys and values go
// through the same blocks (reference_model.h): static fp8, int8 and int4 caches over prefill,
// graph-replayed and fused decode; a dynamic cache whose sequences use different precisions in
// one batch and mix them block by block; requantize() between steps; logits of every token of
// a slice (all_logits); and the errors a caller can trigger.
#include <numeric>

#include "backend/cuda/cuda_model_runner.h"
#include "core/error.h"
#include "kv/kv_format.h"
#include "reference_model.h"
#include "small_models.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;
using kv::KvPrecision;

// Entries at `precision` for the given slots.
std::vector<int32_t> entries(const std::vector<int32_t>& slots, KvPrecision precision) {
  std::vector<int32_t> out;
  for (int32_t s : slots) out.push_back(kv::make_entry(kv::precision_code(precision), s));
  return out;
}

// The runner computes keys and values in bf16, the twin in fp32 (rounded to bf16 before it
// quantizes): where a value sits near a step the two pick neighbouring codes. fp8's steps are
// 6-12% of the value and int4's a fifteenth of the row's range, so those flips move logits
// more than int8's.
float tolerance(KvPrecision p) {
  return p == KvPrecision::kInt4 ? 6e-2f : p == KvPrecision::kFP8 ? 5e-2f : 3e-2f;
}

void expect_logits_close(const std::vector<float>& got, const std::vector<float>& ref, float tol,
                         const std::string& what) {
  expect_close(got, ref, tol, tol, what);
  std::vector<float> sorted = ref;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
  if (sorted[0] - sorted[1] > 2 * tol) EXPECT_EQ(argmax(got), argmax(ref)) << "top-1, " << what;
}

struct StaticCase {
  KvPrecision precision;
  bool llama3;
};

class StaticQuantizedCache : public ::testing::TestWithParam<StaticCase> {};

// Prefill, then greedy decode steps at batch 1: graph replays of the fused path, whose QKV GEMV
// quantizes each new key and value.
TEST_P(StaticQuantizedCache, PrefillAndDecodeMatchTheTwinAtThatPrecision) {
  OPTIMATE_REQUIRE_GPU();
  const StaticCase sc = GetParam();
  if (sc.precision == KvPrecision::kFP8) OPTIMATE_REQUIRE_FP8();
  const ModelConfig c = small_config(sc.llama3);
  const LoadedModel host = make_dummy_model(c, 1234);
  CudaRunnerOptions o = small_options();
  o.kv_cache_dtype = sc.precision;
  CudaModelRunner runner(host, o);
  EXPECT_EQ(runner.kv_shape().layout.base, sc.precision);
  EXPECT_EQ(runner.kv_shape().num_blocks, 200);
  const int64_t V = c.vocab_size;
  std::vector<int32_t> tokens = random_tokens(45, V, 5);
  const std::vector<int32_t> table = entries(scattered_table(8, 3), sc.precision);
  std::vector<std::vector<float>> got;
  std::vector<float> logits;
  runner.forward({{SeqSlice{tokens, 0, table, true}}}, logits);
  got.push_back(logits);
  for (int step = 0; step < 6; ++step) {
    const std::vector<int32_t> one = {argmax(logits)};
    tokens.push_back(one[0]);
    runner.forward({{SeqSlice{one, int64_t(tokens.size()) - 1, table, true}}}, logits);
    got.push_back(logits);
  }
  const std::vector<float> ref = ReferenceModel(host).logits(tokens, [&](int64_t) { return sc.precision; });
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t pos = 44 + int64_t(i);
    expect_logits_close(got[i], row(ref, pos, V), tolerance(sc.precision),
                        std::string(kv::kv_precision_name(sc.precision)) + " cache, position " + std::to_string(pos));
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, StaticQuantizedCache,
                         ::testing::Values(StaticCase{KvPrecision::kFP8, true}, StaticCase{KvPrecision::kInt8, true},
                                           StaticCase{KvPrecision::kInt4, true}, StaticCase{KvPrecision::kFP8, false},
                                           StaticCase{KvPrecision::kInt8, false}, StaticCase{KvPrecision::kInt4, false}),
                         [](const auto& info) {
                           return std::string(kv::kv_precision_name(info.param.precision)) +
                                  (info.param.llama3 ? "Llama3Gqa" : "BiasTiedD128");
                         });

// A dynamic cache (finest int4): three sequences in one batch, one all bf16, one all int8, one
// whose blocks cycle int8, bf16, int4, fp8. Prefill together, decode together (graphs, the KV
// write kernel), then the mixed one alone (the fused GEMV's write).
TEST(DynamicKvCache, SequencesOfDifferentAndMixedPrecisionsMatchTheTwin) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(true);
  const LoadedModel host = make_dummy_model(c, 77);
  CudaRunnerOptions o = small_options();
  o.kv_finest_precision = KvPrecision::kInt4;
  CudaModelRunner runner(host, o);
  const kv::KvLayout& layout = runner.kv_shape().layout;
  ASSERT_TRUE(layout.dynamic());
  ASSERT_EQ(layout.page_slots, 4);
  const int64_t V = c.vocab_size, bs = runner.kv_shape().block_size;
  const std::vector<std::vector<KvPrecision>> patterns = {
      {KvPrecision::kBF16}, {KvPrecision::kInt8},
      {KvPrecision::kInt8, KvPrecision::kBF16, KvPrecision::kInt4, KvPrecision::kFP8}};
  std::vector<std::vector<int32_t>> prompts, tables;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(random_tokens(30 + 7 * i, V, 200 + i));
    std::vector<int32_t> t;
    for (int b = 0; b < 4; ++b) {  // each block on a page of its own, quantized ones inside it
      const KvPrecision p = patterns[i][b % patterns[i].size()];
      const int32_t slot = 4 * (10 * i + 3 * b + 1) + (p == KvPrecision::kBF16 ? 0 : p == KvPrecision::kInt4 ? 3 : 2);
      t.push_back(kv::make_entry(kv::precision_code(p), slot));
    }
    tables.push_back(t);
  }
  auto precision_at = [&](int i) {
    return [&, i](int64_t pos) { return patterns[i][(pos / bs) % patterns[i].size()]; };
  };
  std::vector<std::vector<std::vector<float>>> got(3);  // per sequence, logits per step
  std::vector<float> logits;
  ForwardBatch prefill;
  for (int i = 0; i < 3; ++i) prefill.seqs.push_back({prompts[i], 0, tables[i], true});
  runner.forward(prefill, logits);
  for (int i = 0; i < 3; ++i) got[i].push_back(row(logits, i, V));
  for (int step = 0; step < 3; ++step) {
    ForwardBatch decode;
    std::vector<std::vector<int32_t>> one(3);
    for (int i = 0; i < 3; ++i) {
      one[i] = {argmax(got[i].back())};
      prompts[i].push_back(one[i][0]);
      decode.seqs.push_back({one[i], int64_t(prompts[i].size()) - 1, tables[i], true});
    }
    runner.forward(decode, logits);
    for (int i = 0; i < 3; ++i) got[i].push_back(row(logits, i, V));
  }
  {
    const std::vector<int32_t> one = {argmax(got[2].back())};
    prompts[2].push_back(one[0]);
    runner.forward({{SeqSlice{one, int64_t(prompts[2].size()) - 1, tables[2], true}}}, logits);
    got[2].push_back(logits);
  }
  const ReferenceModel ref_model(host);
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> ref = ref_model.logits(prompts[i], precision_at(i));
    const int64_t first = int64_t(prompts[i].size()) - int64_t(got[i].size());
    for (size_t s = 0; s < got[i].size(); ++s)
      expect_logits_close(got[i][s], row(ref, first + int64_t(s), V), tolerance(KvPrecision::kInt4),
                          "sequence " + std::to_string(i) + ", position " + std::to_string(first + int64_t(s)));
  }
}

// A prompt prefilled into bf16 blocks, requantized to int8, then decoded on the int8 blocks
// (the new token written quantized): the twin keeps every position's keys as int8 blocks.
TEST(DynamicKvCache, RequantizedBlocksDecodeAsTheTwin) {
  OPTIMATE_REQUIRE_GPU();
  for (bool llama3 : {true, false}) {
    const ModelConfig c = small_config(llama3);
    const LoadedModel host = make_dummy_model(c, 91);
    CudaRunnerOptions o = small_options();
    o.kv_finest_precision = KvPrecision::kInt8;
    CudaModelRunner runner(host, o);
    ASSERT_EQ(runner.kv_shape().layout.page_slots, 2);
    const int64_t V = c.vocab_size;
    std::vector<int32_t> tokens = random_tokens(40, V, 17);
    const std::vector<int32_t> slots = {6, 40, 2, 100};
    const std::vector<int32_t> full = entries(slots, KvPrecision::kBF16), int8 = entries(slots, KvPrecision::kInt8);
    std::vector<float> logits;
    runner.forward({{SeqSlice{tokens, 0, full, true}}}, logits);
    std::vector<RequantizeOp> ops;
    for (size_t b = 0; b < 3; ++b) ops.push_back({full[b], int8[b]});  // blocks of positions 0..47
    runner.requantize(ops);
    const std::vector<int32_t> one = {argmax(logits)};
    tokens.push_back(one[0]);
    runner.forward({{SeqSlice{one, 40, int8, true}}}, logits);
    const std::vector<float> ref = ReferenceModel(host).logits(tokens, [](int64_t) { return KvPrecision::kInt8; });
    // The prompt's later layers were computed over bf16 keys before requantizing; the twin's
    // over int8 ones: a difference of 8-bit rounding, inside the tolerance.
    expect_logits_close(logits, row(ref, 40, V), tolerance(KvPrecision::kInt8),
                        std::string("after requantize, ") + (llama3 ? "llama3" : "qwen2"));
  }
}

TEST(DynamicKvCache, BadRequantizeOpsAreRefused) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(true);
  CudaRunnerOptions o = small_options();
  o.kv_finest_precision = KvPrecision::kInt8;
  CudaModelRunner dynamic(make_dummy_weights(c, 3), o);
  const int32_t bf16_4 = kv::make_entry(0, 4), int8_4 = kv::make_entry(2, 4);
  const std::vector<std::vector<RequantizeOp>> bad = {
      {{int8_4, int8_4}},                      // not from a bf16 block
      {{bf16_4, int8_4}, {kv::make_entry(0, 6), int8_4}},  // into a slot another op takes
      {{bf16_4, kv::make_entry(3, 4)}},        // int4: finer than the layout holds
      {{bf16_4, int8_4}, {bf16_4, int8_4}},    // the same block twice
      {{kv::make_entry(0, 200), kv::make_entry(2, 200)}},  // outside the cache
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    try {
      dynamic.requantize(bad[i]);
      ADD_FAILURE() << "case " << i << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << "case " << i << ": " << e.what();
    }
  }
  CudaModelRunner fixed(make_dummy_weights(c, 3), small_options());
  const std::vector<RequantizeOp> op = {{bf16_4, int8_4}};
  EXPECT_THROW(fixed.requantize(op), Error);
  // A static int8 cache has no room for a bf16 block in a slot: such entries are refused.
  CudaRunnerOptions int8_opts = small_options();
  int8_opts.kv_cache_dtype = KvPrecision::kInt8;
  CudaModelRunner int8_runner(make_dummy_weights(c, 3), int8_opts);
  std::vector<float> logits;
  const std::vector<int32_t> tokens = {1, 2, 3}, bf16_table = {0};
  EXPECT_THROW(int8_runner.forward({{SeqSlice{tokens, 0, bf16_table, true}}}, logits), Error);
}

TEST(KvCacheOptions, LayoutErrorsAreClear) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(true);
  CudaRunnerOptions f32 = small_options();
  f32.kv_cache_dtype = KvPrecision::kF32;
  try {
    CudaModelRunner runner(make_dummy_weights(c, 1), f32);
    FAIL() << "f32 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
  }
  CudaRunnerOptions channel = small_options();  // int4 keys scaled per channel: not built here
  channel.kv_finest_precision = KvPrecision::kInt4;
  channel.kv_int4_keys = kv::Int4Keys::kPerChannel;
  try {
    CudaModelRunner runner(make_dummy_weights(c, 1), channel);
    FAIL() << "per-channel int4 keys accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
  }
  CudaRunnerOptions odd = small_options();
  odd.kv_finest_precision = KvPrecision::kInt4;
  odd.num_kv_blocks = 202;  // not whole pages of 4 slots
  EXPECT_THROW(CudaModelRunner(make_dummy_weights(c, 1), odd), Error);
}

// Logits of every token of a slice, in order, next to an ordinary slice: more rows than the
// logits buffer (max_num_seqs = 16) holds, so the LM head runs in chunks.
TEST(AllLogits, EveryTokensRowInOrderAsForwardsLastRow) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(true);
  const LoadedModel host = make_dummy_model(c, 12);
  CudaModelRunner runner(host, small_options());
  const int64_t V = c.vocab_size;
  const std::vector<int32_t> a = random_tokens(45, V, 1), b = random_tokens(20, V, 2);
  const std::vector<int32_t> ta = scattered_table(3, 0), tb = scattered_table(2, 100);
  std::vector<float> logits;
  SeqSlice all{a, 0, ta, true};
  all.all_logits = true;
  runner.forward({{all, SeqSlice{b, 0, tb, true}}}, logits);
  ASSERT_EQ(logits.size(), size_t(46 * V));
  const ReferenceModel ref(host);
  const std::vector<float> ref_a = ref.logits(a);
  for (int64_t r = 0; r < 45; ++r)
    expect_close(row(logits, r, V), row(ref_a, r, V), 3e-2f, 3e-2f, "all_logits row " + std::to_string(r));
  expect_close(row(logits, 45, V), row(ref.logits(b), 19, V), 3e-2f, 3e-2f, "the next slice's row");
  // Rows 15, 16 (either side of the first chunk's end) and 44 against forward's last row of
  // that prefix, run on its own blocks.
  for (int64_t r : {15, 16, 44}) {
    std::vector<float> last;
    const std::vector<int32_t> prefix(a.begin(), a.begin() + r + 1), table = scattered_table(3, 150);
    runner.forward({{SeqSlice{prefix, 0, table, true}}}, last);
    expect_close(row(logits, r, V), last, 1.5e-2f, 2e-2f, "all_logits row " + std::to_string(r) + " vs last row");
  }
  std::vector<int32_t> ids;
  EXPECT_THROW(runner.forward_greedy({{all}}, ids), Error);
}

}  // namespace
}  // namespace optimate::cuda
