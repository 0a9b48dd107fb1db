// The simulated backend: its cost model matches the published shape of Llama-3-8B, its
// clock advances by exactly the modelled step times, and a run is reproducible bit for bit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "bench/bench_target.h"
#include "bench/cost_model.h"
#include "bench/in_process.h"
#include "bench/plots.h"
#include "bench/report_markdown.h"
#include "bench/report_json.h"
#include "bench/sim_runner.h"
#include "bench/summary.h"
#include "core/error.h"

namespace optimate::bench {
namespace {

const std::string kProfile = std::string(OPTIMATE_TEST_DATA_DIR) + "/../../profiles/h200-llama3-8b.json";

TEST(CostModel, WeightBytesMatchLlama3ParameterCount) {
  const CostModel model(load_cost_profile(kProfile));
  // Meta-Llama-3-8B has 8,030,261,248 parameters; a step reads all but the embedding table
  // (128256 x 4096) and the RMSNorm weights (65 x 4096), in bf16.
  const double read = 8030261248.0 - 128256.0 * 4096.0 - 65.0 * 4096.0;
  EXPECT_DOUBLE_EQ(model.weight_bytes_per_step(), read * 2.0);
  // 2 (K and V) x 32 layers x 8 KV heads x 128 dims x 2 bytes.
  EXPECT_DOUBLE_EQ(model.kv_bytes_per_token(), 131072.0);
}

TEST(CostModel, DecodeIsBandwidthBoundAndLargePrefillComputeBound) {
  const CostModel model(load_cost_profile(kProfile));
  const CostProfile& p = model.profile();
  const StepCost decode = model.step_cost({{1, 0}});
  const double weight_s = decode.weight_bytes / (p.memory_bandwidth_bytes_per_s * p.gemm_bandwidth_efficiency);
  EXPECT_GT(weight_s, decode.gemm_flops / (p.peak_flops * p.gemm_compute_efficiency));
  const StepCost prefill = model.step_cost({{8192, 0}});
  EXPECT_GT(prefill.gemm_flops / (p.peak_flops * p.gemm_compute_efficiency),
            prefill.weight_bytes / (p.memory_bandwidth_bytes_per_s * p.gemm_bandwidth_efficiency));
  // Batching decodes shares the weight reads: 64 sequences cost far less than 64 steps.
  std::vector<SeqWork> batch(64, SeqWork{1, 512});
  EXPECT_LT(model.step_cost(batch).seconds, 2.0 * decode.seconds);
}

// A context read from quantized blocks costs its bytes at the quantized efficiency: int8
// blocks hold half the bytes and are read at 0.55 / 0.85 of bf16's rate (the H200 profile).
TEST(CostModel, QuantizedContextBytesAreReadAtTheirOwnEfficiency) {
  const CostModel model(load_cost_profile(kProfile));
  const CostProfile& p = model.profile();
  ASSERT_DOUBLE_EQ(p.quantized_attention_bandwidth_efficiency, 0.55);
  const double bf16 = model.kv_bytes_per_token() * 8192;
  SeqWork full{1, 8192};
  SeqWork quantized{1, 8192};
  quantized.full_context_bytes = 0.0;
  quantized.quantized_context_bytes = bf16 / 2;
  const double bw = p.memory_bandwidth_bytes_per_s;
  const double saved = model.step_cost({full}).seconds - model.step_cost({quantized}).seconds;
  EXPECT_NEAR(saved, bf16 / (bw * p.attention_bandwidth_efficiency) - bf16 / 2 / (bw * 0.55), 1e-9);
}

// int4 blocks are read at their own efficiency (the H200 kernels read them at a third of the
// copy rate, fp8 and int8 at about 60%): a quarter of bf16's bytes costs 0.85 / 0.3 of its time
// per byte.
TEST(CostModel, Int4ContextBytesAreReadAtTheirOwnEfficiency) {
  const CostModel model(load_cost_profile(kProfile));
  const CostProfile& p = model.profile();
  ASSERT_DOUBLE_EQ(p.int4_attention_bandwidth_efficiency, 0.3);
  const double bf16 = model.kv_bytes_per_token() * 8192;
  SeqWork int8{1, 8192}, int4{1, 8192};
  int8.full_context_bytes = int4.full_context_bytes = 0.0;
  int8.quantized_context_bytes = bf16 / 4;
  int4.int4_context_bytes = bf16 / 4;
  const double bw = p.memory_bandwidth_bytes_per_s;
  const double extra = model.step_cost({int4}).seconds - model.step_cost({int8}).seconds;
  EXPECT_NEAR(extra, bf16 / 4 / (bw * 0.3) - bf16 / 4 / (bw * 0.55), 1e-9);
}

// kv_quant gets the dynamic cache of the same memory: pages of 2 slots for int8, of 4 for int4
// (per-token keys), as many full-precision blocks give or take the slot rounding.
TEST(Sim, KvQuantGetsADynamicCacheOfTheSameMemory) {
  const CostProfile p = load_cost_profile(kProfile);
  const kv::KvLayout fixed = SimModelRunner::plan_layout(p);
  EXPECT_FALSE(fixed.dynamic());
  EXPECT_EQ(SimModelRunner::num_slots(p, fixed), p.num_kv_blocks);
  for (kv::KvPrecision finest : {kv::KvPrecision::kInt8, kv::KvPrecision::kInt4}) {
    const kv::KvLayout l = SimModelRunner::plan_layout(p, finest);
    ASSERT_TRUE(l.dynamic());
    const int64_t pages = SimModelRunner::num_slots(p, l) / l.page_slots;
    EXPECT_LE(pages, p.num_kv_blocks);
    EXPECT_GE(pages, p.num_kv_blocks * 0.88);  // int4's pages are 12.5% over a bf16 block
  }
}

Workload small_workload(ArrivalKind kind) {
  WorkloadSpec spec;
  spec.name = "sim";
  spec.seed = 5;
  spec.num_requests = 200;
  spec.arrival = {.kind = kind, .rate_per_s = 40.0, .concurrency = 16};
  spec.prompt = {.kind = LengthKind::kUniform, .min = 16, .max = 600};
  spec.output = {.kind = LengthKind::kUniform, .min = 4, .max = 120};
  spec.priorities = {{"high", 2, 0.2}, {"low", 1, 0.8}};
  spec.token_id_max = 4000;
  return build_workload(spec);
}

// `num_requests` identical requests, all sent at 0.
Workload offline_fixed(int64_t num_requests, int64_t prompt_len, int64_t output_len) {
  WorkloadSpec spec;
  spec.num_requests = num_requests;
  spec.arrival = {.kind = ArrivalKind::kOffline};
  spec.prompt = {.kind = LengthKind::kFixed, .value = prompt_len};
  spec.output = {.kind = LengthKind::kFixed, .value = output_len};
  spec.token_id_max = 4000;
  return build_workload(spec);
}

RunResult simulate(const Workload& w) {
  EngineConfig config;
  config.max_num_seqs = 32;
  BuiltEngine target = build_sim_engine(config, load_cost_profile(kProfile), w.spec.token_id_max + 1);
  return run_in_process(target, w);
}

// The configuration is checked as every backend checks it, before the profile's block size and
// capacity take the place of its own: a value no backend runs is refused, not ignored.
TEST(Sim, SettingsNoBackendRunsAreRefused) {
  const CostProfile card = load_cost_profile(kProfile);
  EngineConfig config;
  config.block_size = 3;
  EXPECT_THROW(build_sim_engine(config, card, 4001), Error);
  config = EngineConfig{};
  config.num_kv_blocks = -1;
  EXPECT_THROW(build_sim_engine(config, card, 4001), Error);
}

// A static quantized cache (kv-cache-dtype fp8) holds the memory of the bf16 one in fp8
// blocks: the CUDA runner logged 157,600 bf16 and 305,504 fp8 tokens at 0.25 of an H200
// (docs/benchmarks.md, every row again), a ratio of 1.94; the simulated engine gets the same
// ratio, and a decode over the same context costs it less.
TEST(Sim, AStaticFp8CacheHoldsTheSameMemoryInFp8Blocks) {
  EngineConfig bf16;
  bf16.num_kv_blocks = 9850;  // 157,600 tokens, the bf16 cache of 0.25 of the card
  EngineConfig fp8 = bf16;
  fp8.kv_cache_dtype = KvCacheDtype::kFP8;
  const CostProfile p = load_cost_profile(kProfile);
  BuiltEngine a = build_sim_engine(bf16, p, 4001);
  BuiltEngine b = build_sim_engine(fp8, p, 4001);
  const int64_t bf16_blocks = a.engine->config().num_kv_blocks, fp8_blocks = b.engine->config().num_kv_blocks;
  EXPECT_EQ(bf16_blocks, 9850);
  EXPECT_NEAR(double(fp8_blocks) / double(bf16_blocks), 305504.0 / 157600.0, 0.01);

  const Workload w = offline_fixed(8, 2000, 64);
  const RunSummary sa = summarize(run_in_process(a, w)), sb = summarize(run_in_process(b, w));
  EXPECT_EQ(sa.total_output_tokens, sb.total_output_tokens);
  EXPECT_LT(sb.tpot_ms.mean, sa.tpot_ms.mean);
}

// The simulated runner counts a context's int4 blocks as int4 bytes: a static int4 cache's
// decode slows when the profile's int4 rate falls, and not when the 8-bit rate does.
TEST(Sim, Int4BlocksAreReadAtTheInt4Rate) {
  auto tpot = [](double int8_eff, double int4_eff) {
    CostProfile p = load_cost_profile(kProfile);
    p.quantized_attention_bandwidth_efficiency = int8_eff;
    p.int4_attention_bandwidth_efficiency = int4_eff;
    EngineConfig config;
    config.kv_cache_dtype = KvCacheDtype::kInt4;
    BuiltEngine e = build_sim_engine(config, p, 4001);
    return summarize(run_in_process(e, offline_fixed(16, 4000, 32))).tpot_ms.mean;
  };
  EXPECT_GT(tpot(0.55, 0.3), tpot(0.55, 0.55) * 1.005);  // the prompts' prefill dilutes the difference
  EXPECT_DOUBLE_EQ(tpot(0.2, 0.3), tpot(0.55, 0.3));
}

// FP8 weights (quantization = "fp8") read the projections at a byte a weight, the LM head
// still at two (the CUDA backend keeps it bf16): Llama-3-8B's 6.98e9 projection weights and
// 5.25e8 LM head weights. A batch-1 decode, bound by those bytes, gets faster by their ratio.
TEST(Sim, Fp8WeightsHalveTheProjectionsBytes) {
  CostProfile p = load_cost_profile(kProfile);
  const CostModel bf16(p);
  p.fp8_weights = true;
  const CostModel fp8(p);
  const double lm_head = 128256.0 * 4096.0;
  const double projections = bf16.weight_bytes_per_step() / 2.0 - lm_head;
  EXPECT_NEAR(projections, 6.98e9, 0.01e9);
  EXPECT_DOUBLE_EQ(fp8.weight_bytes_per_step(), projections + 2.0 * lm_head);

  EngineConfig config;
  config.quantization = WeightQuantization::kFp8;
  BuiltEngine engine = build_sim_engine(config, load_cost_profile(kProfile), 4001);
  EngineConfig plain;
  BuiltEngine reference = build_sim_engine(plain, load_cost_profile(kProfile), 4001);
  const Workload w = offline_fixed(1, 16, 32);
  const double ratio = summarize(run_in_process(engine, w)).tpot_ms.mean /
                       summarize(run_in_process(reference, w)).tpot_ms.mean;
  // The step's weight reads at the profile's rate and its fixed overheads (attention over 16 to
  // 47 tokens adds under 0.1%).
  auto step_s = [&](const CostModel& m) {
    return p.step_overhead_s + p.per_seq_overhead_s +
           m.weight_bytes_per_step() / (p.memory_bandwidth_bytes_per_s * p.gemm_bandwidth_efficiency);
  };
  EXPECT_NEAR(ratio, step_s(fp8) / step_s(bf16), 0.005);
  EXPECT_LT(ratio, 0.6);
}

// Greedy steps draw their tokens the way a GPU backend does (no logits to the host) and cost
// the same simulated time as the logits path; a step with a sampled row falls back.
TEST(Sim, GreedyStepsSampleOnTheDeviceAtTheSameCost) {
  auto clock = std::make_shared<FakeClock>();
  SimModelRunner runner(load_cost_profile(kProfile), clock, 50);
  const std::vector<int32_t> prompt(37, 3), one = {7};
  const std::vector<int32_t> table = {0, 1, 2};
  const ForwardBatch batch{{SeqSlice{prompt, 0, table, true}, SeqSlice{one, 20, table, true}}};
  SamplingParams greedy, sampled;
  greedy.temperature = 0.0f;
  sampled.temperature = 0.7f;
  const std::vector<SampleSpec> greedy_rows = {{&greedy, 1, 0}, {&greedy, 2, 5}};
  std::vector<int32_t> tokens;
  ASSERT_TRUE(runner.forward_sample(batch, greedy_rows, tokens));
  EXPECT_EQ(tokens, (std::vector<int32_t>{0, 0}));
  const int64_t device_ns = clock->now_ns();
  EXPECT_GT(device_ns, 0);
  std::vector<float> logits;
  runner.forward(batch, logits);
  EXPECT_EQ(clock->now_ns(), 2 * device_ns);
  EXPECT_EQ(logits, std::vector<float>(2 * 50, 0.0f));  // whose argmax is token 0
  const std::vector<SampleSpec> mixed = {{&greedy, 1, 0}, {&sampled, 2, 5}};
  EXPECT_FALSE(runner.forward_sample(batch, mixed, tokens));
  EXPECT_EQ(clock->now_ns(), 2 * device_ns);  // nothing ran
}

TEST(Sim, SameWorkloadAndProfileGiveTheSameReport) {
  for (ArrivalKind kind : {ArrivalKind::kPoisson, ArrivalKind::kClosedLoop}) {
    const Workload w = small_workload(kind);
    const RunResult a = simulate(w), b = simulate(w);
    EXPECT_EQ(run_to_json(a, summarize(a)).dump(), run_to_json(b, summarize(b)).dump());
    const RunSummary s = summarize(a);
    EXPECT_EQ(s.completed, 200);
    EXPECT_EQ(s.failed, 0);
    EXPECT_GT(s.batch_size.max, 1.0);
  }
}

TEST(Sim, EveryRequestGetsItsTokensAndTimeFollowsTheCostModel) {
  const Workload w = small_workload(ArrivalKind::kPoisson);
  const RunResult run = simulate(w);
  for (size_t i = 0; i < w.requests.size(); ++i) {
    EXPECT_EQ(run.records[i].output_tokens, w.requests[i].max_tokens);
    EXPECT_EQ(static_cast<int64_t>(run.records[i].token_times_s.size()), w.requests[i].max_tokens);
    EXPECT_GE(run.records[i].first_token_s, run.records[i].arrival_s);
  }
  // A lone request on an idle engine: TTFT is one prefill step, then one decode step per token.
  const RunResult single = simulate(offline_fixed(1, 100, 3));
  const CostModel model(load_cost_profile(kProfile));
  const auto& r = single.records.at(0);
  EXPECT_NEAR(r.first_token_s, model.step_cost({{100, 0}}).seconds, 1e-9);
  EXPECT_NEAR(r.token_times_s[1] - r.token_times_s[0], model.step_cost({{1, 100}}).seconds, 1e-9);
  EXPECT_NEAR(r.token_times_s[2] - r.token_times_s[1], model.step_cost({{1, 101}}).seconds, 1e-9);
}

TEST(Sim, WithOneSlotEachRequestQueuesUntilThePreviousOneFinishes) {
  const Workload w = offline_fixed(4, 64, 5);
  EngineConfig config;
  config.max_num_seqs = 1;
  BuiltEngine target = build_sim_engine(config, load_cost_profile(kProfile), w.spec.token_id_max + 1);
  const RunResult run = run_in_process(target, w);
  ASSERT_EQ(run.records.size(), 4u);
  // All four arrive at 0; the first runs at once, the k-th starts when the (k-1)-th ends.
  EXPECT_DOUBLE_EQ(run.records[0].scheduled_s, 0.0);
  double expected_sum_ms = 0.0;
  for (size_t k = 1; k < run.records.size(); ++k) {
    EXPECT_GT(run.records[k - 1].finish_s, 0.0);
    EXPECT_NEAR(run.records[k].scheduled_s, run.records[k - 1].finish_s, 1e-9) << k;
    EXPECT_LT(run.records[k].scheduled_s, run.records[k].first_token_s);
    expected_sum_ms += run.records[k - 1].finish_s * 1e3;
  }
  const RunSummary s = summarize(run);
  EXPECT_EQ(s.queue_ms.count, 4);
  EXPECT_NEAR(s.queue_ms.mean, expected_sum_ms / 4.0, 1e-6);
  EXPECT_NEAR(s.queue_ms.max, run.records[2].finish_s * 1e3, 1e-6);
  const std::string md = render_markdown({s}, "queue");
  EXPECT_NE(md.find(fmt::format("| Mean Queue time (ms) | {:.2f} |", s.queue_ms.mean)), std::string::npos) << md;
  EXPECT_NE(md.find(fmt::format("| P99 Queue time (ms) | {:.2f} |", s.queue_ms.p99)), std::string::npos) << md;
  EXPECT_NE(md.find("GPU utilization: not sampled (simulated backend)."), std::string::npos) << md;
  EXPECT_EQ(run_to_json(run, s)["summary"]["queue_ms"]["count"], 4);
  EXPECT_NE(plot_latency_cdf({run}, LatencyMetric::kQueue).find("Queue time distribution"), std::string::npos);
}

}  // namespace
}  // namespace optimate::bench
