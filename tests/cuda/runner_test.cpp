// The CUDA runner end to end on small random-weight Llama configs, against the fp32 CPU twin
// (reference_model.h): prefill then greedy decode, chunked prefill mixed with decode in one
// step, a step wider than the MLP's chunk, graph replay against eager launches, dummy weights
// made on the GPU against the same weights uploaded from the host, and the errors a caller can
// trigger.
#include <algorithm>
#include <numeric>

#include "backend/cuda/cuda_model_runner.h"
#include "backend/cuda/gemv.h"
#include "core/error.h"
#include "kv/kv_format.h"
#include "kv/kv_precision.h"
#include "reference_model.h"
#include "small_models.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;

class RunnerVsReference : public ::testing::TestWithParam<bool> {};

TEST_P(RunnerVsReference, PrefillThenGreedyDecodeMatchesCpuTwin) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(GetParam());
  const LoadedModel host = make_dummy_model(c, 1234);
  CudaModelRunner runner(host, small_options());
  const int64_t V = c.vocab_size;

  std::vector<int32_t> tokens = random_tokens(45, V, 5);
  const std::vector<int32_t> table = scattered_table(8, 3);
  std::vector<std::vector<float>> got;
  std::vector<float> logits;
  runner.forward({{SeqSlice{tokens, 0, table, true}}}, logits);
  got.push_back(logits);
  for (int step = 0; step < 6; ++step) {
    const int32_t next = argmax(logits);
    tokens.push_back(next);
    const std::vector<int32_t> one = {next};
    runner.forward({{SeqSlice{one, int64_t(tokens.size()) - 1, table, true}}}, logits);
    got.push_back(logits);
  }
  const std::vector<float> ref = ReferenceModel(host).logits(tokens);
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t pos = 44 + int64_t(i);
    const std::vector<float> r = row(ref, pos, V);
    expect_close(got[i], r, 3e-2f, 3e-2f, "logits at position " + std::to_string(pos));
    std::vector<float> sorted = r;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] > 0.05f) EXPECT_EQ(argmax(got[i]), argmax(r)) << "top-1 at position " << pos;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, RunnerVsReference, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Llama3Gqa" : "BiasTiedD128"; });

TEST(CudaRunner, ChunkedPrefillMixedWithDecodeMatchesCpuTwin) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(true);
  const LoadedModel host = make_dummy_model(c, 99);
  for (bool tensor_cores : {true, false}) {
    CudaRunnerOptions o = small_options();
    o.tensor_core_prefill = tensor_cores;
    CudaModelRunner runner(host, o);
    const std::vector<int32_t> a = random_tokens(100, c.vocab_size, 7);
    const std::vector<int32_t> b = random_tokens(20, c.vocab_size, 8);
    const std::vector<int32_t> ta = scattered_table(7, 11), tb = scattered_table(2, 150);
    std::vector<float> logits;
    // Step 1: a's first chunk (no logits) and all of b's prompt.
    runner.forward({{SeqSlice{std::span(a).first(70), 0, ta, false}, SeqSlice{b, 0, tb, true}}}, logits);
    ASSERT_EQ(logits.size(), size_t(c.vocab_size));
    // Step 2: b decodes one token while a's second chunk prefills after its cached context.
    const std::vector<int32_t> b_next = {int32_t(argmax(logits))};
    runner.forward({{SeqSlice{b_next, 20, tb, true}, SeqSlice{std::span(a).subspan(70), 70, ta, true}}}, logits);
    ASSERT_EQ(logits.size(), size_t(2 * c.vocab_size));
    std::vector<int32_t> b_all = b;
    b_all.push_back(b_next[0]);
    const ReferenceModel ref(host);
    const std::string mode = tensor_cores ? " (tensor-core prefill)" : " (row prefill)";
    expect_close(row(logits, 0, c.vocab_size), row(ref.logits(b_all), 20, c.vocab_size), 3e-2f, 3e-2f, "decode row" + mode);
    expect_close(row(logits, 1, c.vocab_size), row(ref.logits(a), 99, c.vocab_size), 3e-2f, 3e-2f, "chunk row" + mode);
  }
}

// A step wider than the MLP's chunk (kMlpChunkRows) runs its MLP in chunks, whose buffers share
// memory with the logits: three 700-token prompts in one step (2,100 rows, cut inside the second
// prompt) against the CPU twin with bf16 weights, and with FP8 weights (whose norm and SiLU write
// each chunk's e4m3 rows into one scratch) against the same prompts one step each, unchunked.
TEST(CudaRunner, MlpInChunksMatchesTheWholeStep) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(true);
  const LoadedModel host = make_dummy_model(c, 98);
  CudaRunnerOptions o = small_options();
  o.max_num_batched_tokens = 2200;
  constexpr int64_t kLen = 700, kBlocks = (kLen + 15) / 16;
  std::vector<std::vector<int32_t>> prompts, tables;
  for (int64_t k = 0; k < 3; ++k) {
    prompts.push_back(random_tokens(kLen, c.vocab_size, uint32_t(40 + k)));
    std::vector<int32_t> t;
    for (int64_t i = 0; i < kBlocks; ++i) t.push_back(int32_t((37 * (k * kBlocks + i)) % 200));
    tables.push_back(t);
  }
  ForwardBatch step;
  for (int64_t k = 0; k < 3; ++k) step.seqs.push_back({prompts[k], 0, tables[k], true});
  {
    CudaModelRunner runner(host, o);
    std::vector<float> logits;
    runner.forward(step, logits);
    ASSERT_EQ(logits.size(), size_t(3 * c.vocab_size));
    const ReferenceModel ref(host);
    for (int64_t k = 0; k < 3; ++k)
      expect_close(row(logits, k, c.vocab_size), row(ref.logits(prompts[k]), kLen - 1, c.vocab_size), 3e-2f, 3e-2f,
                   "prompt " + std::to_string(k) + " of the chunked step");
  }
  o.quantization = WeightQuantization::kFp8;
  CudaModelRunner fp8(host, o);
  std::vector<float> chunked, single;
  fp8.forward(step, chunked);
  for (int64_t k = 0; k < 3; ++k) {
    fp8.forward({{step.seqs[k]}}, single);
    expect_close(row(chunked, k, c.vocab_size), single, 3e-2f, 3e-2f,
                 "FP8 weights, prompt " + std::to_string(k) + ": chunked step against its own step");
  }
}

TEST(CudaRunner, GraphReplayMatchesEagerDecodeAcrossBatchSizes) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(true);
  CudaRunnerOptions eager_opts = small_options(), graph_opts = small_options();
  eager_opts.cuda_graphs = false;
  CudaModelRunner eager(make_dummy_weights(c, 5), eager_opts);
  CudaModelRunner graph(make_dummy_weights(c, 5), graph_opts);
  for (int64_t batch : {1, 3, 5}) {
    std::vector<std::vector<int32_t>> prompts, tables;
    for (int64_t i = 0; i < batch; ++i) {
      prompts.push_back(random_tokens(30 + 7 * i, c.vocab_size, 100 + i));
      tables.push_back(scattered_table(4, int32_t(20 * i)));
    }
    for (CudaModelRunner* r : {&eager, &graph}) {
      ForwardBatch prefill;
      for (int64_t i = 0; i < batch; ++i) prefill.seqs.push_back({prompts[i], 0, tables[i], false});
      std::vector<float> unused;
      r->forward(prefill, unused);
    }
    // Three decode steps: the graph runner captures at the first and replays after.
    std::vector<int32_t> next(batch, 1);
    for (int step = 0; step < 3; ++step) {
      ForwardBatch decode;
      std::vector<std::vector<int32_t>> one(batch);
      for (int64_t i = 0; i < batch; ++i) {
        one[i] = {next[i]};
        decode.seqs.push_back({one[i], int64_t(prompts[i].size()) + step, tables[i], true});
      }
      std::vector<float> le, lg;
      std::vector<int32_t> greedy;
      eager.forward(decode, le);
      graph.forward_greedy(decode, greedy);
      // forward_greedy left the logits on the device; replaying for them re-writes the same KV.
      graph.forward(decode, lg);
      // The graph runs a padded batch and split counts chosen for the longest context, so
      // cuBLASLt kernels and summation orders differ from the eager step: bf16 activations
      // then differ by an ulp here and there (measured up to 7e-3 on logits of about 0.5).
      expect_close(lg, le, 1.5e-2f, 2e-2f, "graph vs eager, batch " + std::to_string(batch));
      ASSERT_EQ(greedy.size(), size_t(batch));
      for (int64_t i = 0; i < batch; ++i) {
        EXPECT_EQ(greedy[i], argmax(row(lg, i, c.vocab_size))) << "greedy id, row " << i;
        next[i] = greedy[i];
      }
    }
  }
}

TEST(CudaRunner, FusedDecodeAndProgrammaticLaunchMatchTheUnfusedStep) {
  OPTIMATE_REQUIRE_GPU();
  for (bool llama3 : {true, false}) {
    const ModelConfig c = small_config(llama3);
    CudaRunnerOptions o = small_options();
    o.fused_decode_max_rows = kGemvMaxRows;  // the fused kernels at three rows, not only one or two
    CudaModelRunner runner(make_dummy_weights(c, 11), o);
    const int64_t batch = 3;
    std::vector<std::vector<int32_t>> prompts, tables;
    ForwardBatch prefill, decode;
    for (int64_t i = 0; i < batch; ++i) {
      prompts.push_back(random_tokens(20 + 9 * i, c.vocab_size, 300 + i));
      tables.push_back(scattered_table(4, int32_t(30 * i)));
    }
    for (int64_t i = 0; i < batch; ++i) prefill.seqs.push_back({prompts[i], 0, tables[i], false});
    std::vector<std::vector<int32_t>> one(batch, std::vector<int32_t>{7});
    for (int64_t i = 0; i < batch; ++i)
      decode.seqs.push_back({one[i], int64_t(prompts[i].size()), tables[i], true});
    std::vector<float> unused, reference;
    runner.forward(prefill, unused);
    runner.set_launch_options(false, false);
    runner.forward(decode, reference);
    // Every step rewrites the same KV slot before reading it, so steps can be repeated.
    for (bool graphs : {false, true}) {
      runner.set_cuda_graphs(graphs);
      for (bool pdl : {false, true}) {
        runner.set_launch_options(true, pdl);
        std::vector<float> got;
        for (int rep = 0; rep < 2; ++rep) runner.forward(decode, got);
        expect_close(got, reference, 1.5e-2f, 2e-2f,
                     std::string("fused vs unfused, ") + (llama3 ? "llama3" : "qwen2") +
                         (graphs ? ", graphs" : ", eager") + (pdl ? ", programmatic" : ""));
      }
    }
    runner.set_launch_options(true, true);
  }
}

// The GEMM path's elementwise kernels (RoPE with the KV write, row-kernel RMSNorm and SiLU*mul,
// FP8 activations rounded by them) against the separate kernels before them: the same logits
// but for RMSNorm's summation order, over bf16 and FP8 weights and bf16 and fp8 caches, for a
// prefill of three prompts and a decode step of three rows (both on the GEMM path).
TEST(CudaRunner, FusedElementwiseKernelsMatchTheSeparateOnes) {
  OPTIMATE_REQUIRE_GPU();
  for (bool llama3 : {true, false})
    for (WeightQuantization q : {WeightQuantization::kNone, WeightQuantization::kFp8})
      for (kv::KvPrecision kv_dtype : {kv::KvPrecision::kBF16, kv::KvPrecision::kFP8}) {
        if ((q == WeightQuantization::kFp8 || kv_dtype == kv::KvPrecision::kFP8) && !gpu_has_fp8()) continue;
        const ModelConfig c = small_config(llama3);
        CudaRunnerOptions o = small_options();
        o.quantization = q;
        o.kv_cache_dtype = kv_dtype;
        CudaModelRunner runner(make_dummy_weights(c, 21), o);
        const int64_t batch = 3;
        std::vector<std::vector<int32_t>> prompts, tables;
        for (int64_t i = 0; i < batch; ++i) {
          prompts.push_back(random_tokens(30 + 11 * i, c.vocab_size, 500 + i));
          // Entries carry the cache's precision code (kv/kv_format.h): bf16's is 0, fp8's not.
          std::vector<int32_t> t = scattered_table(4, int32_t(30 * i));
          for (int32_t& e : t) e = kv::make_entry(kv::precision_code(kv_dtype), e);
          tables.push_back(t);
        }
        ForwardBatch prefill, decode;
        std::vector<std::vector<int32_t>> one(batch, std::vector<int32_t>{9});
        for (int64_t i = 0; i < batch; ++i) {
          prefill.seqs.push_back({prompts[i], 0, tables[i], true});
          decode.seqs.push_back({one[i], int64_t(prompts[i].size()), tables[i], true});
        }
        const std::string what = std::string(llama3 ? "llama3" : "qwen2") + (q == WeightQuantization::kFp8 ? ", fp8" : "") +
                                 ", kv " + kv::kv_precision_name(kv_dtype);
        // Each step rewrites the same KV rows, so the two kernel sets see the same cache.
        for (const ForwardBatch* b : {&prefill, &decode}) {
          std::vector<float> separate, fused;
          runner.set_fused_elementwise(false);
          runner.forward(*b, separate);
          runner.set_fused_elementwise(true);
          runner.forward(*b, fused);
          // An FP8 activation code may round the other way across an ulp of RMSNorm's output.
          const float tol = q == WeightQuantization::kFp8 ? 3e-2f : 2e-2f;
          expect_close(fused, separate, tol, tol, what + (b == &prefill ? ", prefill" : ", decode"));
        }
      }
}

TEST(CudaRunner, DummyWeightsOnTheGpuEqualTheHostDummyModel) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(false);
  CudaModelRunner on_gpu(make_dummy_weights(c, 77), small_options());
  CudaModelRunner uploaded(make_dummy_model(c, 77), small_options());
  const std::vector<int32_t> tokens = random_tokens(33, c.vocab_size, 9);
  const std::vector<int32_t> table = scattered_table(3, 0);
  std::vector<float> a, b;
  on_gpu.forward({{SeqSlice{tokens, 0, table, true}}}, a);
  uploaded.forward({{SeqSlice{tokens, 0, table, true}}}, b);
  expect_close(a, b, 0.0f, 0.0f, "dummy on GPU vs uploaded");
}

TEST(CudaRunner, ModelThatDoesNotFitFailsBeforeUploading) {
  OPTIMATE_REQUIRE_GPU();
  CudaRunnerOptions o = small_options();
  o.num_kv_blocks = 0;
  o.gpu_memory_utilization = 1e-4;
  try {
    CudaModelRunner runner(make_dummy_model(small_config(true), 1), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("does not fit in GPU memory"), std::string::npos) << e.what();
  }
}

TEST(CudaRunner, BadInputsAreErrorsNamingTheSlice) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(true);
  CudaModelRunner runner(make_dummy_weights(c, 3), small_options());
  std::vector<float> logits;
  const std::vector<int32_t> table = {0, 1};
  const std::vector<int32_t> bad_token = {5, int32_t(c.vocab_size)};
  EXPECT_THROW(runner.forward({{SeqSlice{bad_token, 0, table, true}}}, logits), Error);
  const std::vector<int32_t> tokens = random_tokens(40, c.vocab_size, 1);  // needs 3 blocks
  EXPECT_THROW(runner.forward({{SeqSlice{tokens, 0, table, true}}}, logits), Error);
  const std::vector<int32_t> bad_block = {0, 500, 2};
  EXPECT_THROW(runner.forward({{SeqSlice{tokens, 0, bad_block, true}}}, logits), Error);
  // The runner still works after rejected steps.
  const std::vector<int32_t> ok_table = {0, 1, 2};
  runner.forward({{SeqSlice{tokens, 0, ok_table, true}}}, logits);
  EXPECT_EQ(logits.size(), size_t(c.vocab_size));
}

}  // namespace
}  // namespace optimate::cuda
