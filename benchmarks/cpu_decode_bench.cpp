// CPU runner speed on SmolLM2-135M-Instruct: single-sequence decode and 128-token prefill,
// reported as tokens/s, per thread count, on three paths side by side: the weights as the
// file's Q4_1/Q8_0 blocks with 8-bit activations and integer kernels (q8, the default), the
// same blocks with fp32 activations (f32, the reference), and every weight widened to fp32
// (fp32 weights); and the default path over each KV cache precision (BM_DecodeKv,
// BM_Prefill128Kv) and from an empty context (BM_DecodeEmpty). Skipped when the model file is absent.
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>

#include <benchmark/benchmark.h>
#include <cblas.h>

#include "backend/cpu/cpu_model_runner.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/q8_linear.h"
#include "backend/cpu/small_m_linear.h"
#include "model/weights.h"

namespace {

using optimate::cpu::CpuModelRunner;

const std::string kModel = std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr int64_t kBlockSize = 16;
constexpr int64_t kMaxContext = 1024;
constexpr int64_t kKvBlocks = 4 * kMaxContext / kBlockSize;  // room for 32 sequences of 128 tokens

const optimate::LoadedModel* model() {
  static std::unique_ptr<optimate::LoadedModel> loaded = [] {
    std::unique_ptr<optimate::LoadedModel> m;
    if (std::filesystem::exists(kModel)) m = std::make_unique<optimate::LoadedModel>(optimate::load_model(kModel));
    return m;
  }();
  return loaded.get();
}

// path 0: every weight widened to fp32; 1: blocks as stored, fp32 activations; 2: blocks as
// stored, 8-bit activations (the default).
std::unique_ptr<CpuModelRunner> make_runner(benchmark::State& state, int threads, int64_t path,
                                            optimate::kv::KvPrecision kv = optimate::kv::KvPrecision::kF32) {
  using optimate::CpuActivations;
  const CpuActivations activations = path == 2 ? CpuActivations::kQ8 : CpuActivations::kF32;
  auto runner = std::make_unique<CpuModelRunner>(
      model()->config, model()->weights,
      optimate::cpu::CpuRunnerOptions{.num_kv_blocks = kKvBlocks, .block_size = kBlockSize, .kv_precision = kv,
                                      .num_threads = threads, .keep_quantized = path != 0, .activations = activations});
  state.SetLabel((path == 0 ? "fp32 weights"
                  : path == 1 ? "f32 activations"
                              : "q8 activations, " + std::string(optimate::cpu::cpu_isa_name(runner->isa()))) +
                 ", " + optimate::kv::kv_precision_name(kv) + " KV");
  return runner;
}

// The KV precisions BM_DecodeKv and BM_Prefill128Kv take as their second argument.
constexpr optimate::kv::KvPrecision kKvPrecisions[] = {optimate::kv::KvPrecision::kF32,
                                                       optimate::kv::KvPrecision::kBF16,
                                                       optimate::kv::KvPrecision::kInt8};

std::vector<int32_t> block_table() {
  std::vector<int32_t> t(kMaxContext / kBlockSize);
  std::iota(t.begin(), t.end(), 0);
  return t;
}

std::vector<int32_t> prompt(int64_t n) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 17) % 49152);
  return ids;
}

// Decodes one token per iteration at positions [first, last), wrapping back to `first`: after
// a 32-token prompt up to 512 by default; from an empty context (first 0) without a prompt.
void decode(benchmark::State& state, CpuModelRunner* runner, int64_t first = 32, int64_t last = 512) {
  const auto table = block_table();
  const auto ids = prompt(first);
  std::vector<float> logits;
  if (first > 0) runner->forward({.seqs = {{.token_ids = ids, .block_table = table}}}, logits);
  int64_t pos = first;
  int32_t token = 42;
  for (auto _ : state) {
    runner->forward({.seqs = {{.token_ids = std::span<const int32_t>(&token, 1), .start_pos = pos, .block_table = table}}},
                    logits);
    benchmark::DoNotOptimize(logits.data());
    pos = pos + 1 < last ? pos + 1 : first;
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["weight MB"] = static_cast<double>(runner->weight_bytes()) / 1e6;
}
void BM_Decode(benchmark::State& state) {
  if (!model()) return state.SkipWithError((kModel + " not present").c_str());
  decode(state, make_runner(state, static_cast<int>(state.range(0)), state.range(1)).get());
}
BENCHMARK(BM_Decode)->ArgsProduct({{1, 2}, {0, 1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

// One decode step of `batch` sequences (2 threads), each at a 32-token context: the small
// batches of continuous batching at low concurrency.
void BM_DecodeBatch(benchmark::State& state) {
  if (!model()) return state.SkipWithError((kModel + " not present").c_str());
  const int64_t batch = state.range(0);
  auto runner = make_runner(state, 2, state.range(1));
  const int64_t blocks_per_seq = kKvBlocks / batch;
  std::vector<std::vector<int32_t>> tables(batch);
  const auto ids = prompt(32);
  std::vector<float> logits;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t k = 0; k < blocks_per_seq; ++k) tables[b].push_back(static_cast<int32_t>(b * blocks_per_seq + k));
    runner->forward({.seqs = {{.token_ids = ids, .block_table = tables[b]}}}, logits);
  }
  const int32_t token = 42;
  optimate::ForwardBatch step;
  for (int64_t b = 0; b < batch; ++b)
    step.seqs.push_back({.token_ids = std::span<const int32_t>(&token, 1), .start_pos = 32, .block_table = tables[b]});
  for (auto _ : state) {
    runner->forward(step, logits);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * batch), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeBatch)->ArgsProduct({{1, 2, 4, 8, 16, 24, 32}, {0, 1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

// One SmolLM2 gate/up-sized projection (1536 x 576) for a few tokens: the few-token kernel
// against OpenBLAS sgemm on the same data, one thread, side by side.
void BM_SmallMLinear(benchmark::State& state, bool kernel) {
  const int64_t m = state.range(0), in = 576, out = 1536 * 8;  // 8 layers' worth: out of cache
  std::vector<float> x(m * in, 0.5f), w(out * in, 0.25f), y(m * out);
  for (auto _ : state) {
    if (kernel) optimate::cpu::small_m_linear(x.data(), w.data(), y.data(), m, in, out, 0, out, false);
    else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m), static_cast<blasint>(out),
                     static_cast<blasint>(in), 1.0f, x.data(), static_cast<blasint>(in), w.data(),
                     static_cast<blasint>(in), 0.0f, y.data(), static_cast<blasint>(out));
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight GB/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * out * in * 4), benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_SmallMLinear, small_m_kernel, true)->Arg(2)->Arg(4)->Arg(8)->UseRealTime();
BENCHMARK_CAPTURE(BM_SmallMLinear, openblas_sgemm, false)->Arg(2)->Arg(4)->Arg(8)->UseRealTime();

// One SmolLM2 gate/up projection (3072 x 576, Q4_1 blocks) against `m` tokens, one thread,
// through the integer kernels of each instruction set and the fp32-activation kernels: achieved
// multiply-adds per second.
void BM_QuantizedLinear(benchmark::State& state) {
  const int64_t m = state.range(0), in = 576, out = 3072;
  const int64_t path = state.range(1);  // 0: f32 activations; 1: avx2; 2: avx512-vnni
  optimate::cpu::CpuMatrix w;
  w.rows = out;
  w.cols = in;
  w.dtype = optimate::DType::kQ4_1;
  w.blocks.resize(static_cast<size_t>(out * w.row_bytes()));
  for (size_t i = 0; i < w.blocks.size(); ++i) w.blocks[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  for (int64_t r = 0; r < out * in / 32; ++r) {  // fp16 scale and offset of 2^-6
    w.blocks[static_cast<size_t>(r * 20)] = 0, w.blocks[static_cast<size_t>(r * 20 + 1)] = 0x24;
    w.blocks[static_cast<size_t>(r * 20 + 2)] = 0, w.blocks[static_cast<size_t>(r * 20 + 3)] = 0x24;
  }
  const auto isa = path == 2 ? optimate::cpu::CpuIsa::kAvx512Vnni : optimate::cpu::CpuIsa::kAvx2;
  if (path > 0 && !optimate::cpu::cpu_supports(isa)) return state.SkipWithError("instruction set not supported");
  std::vector<float> x(static_cast<size_t>(m * in), 0.5f), y(static_cast<size_t>(m * out));
  optimate::cpu::Q8Activations scratch;
  const optimate::cpu::Q8Matrix packed = optimate::cpu::pack_q8_matrix(w);
  optimate::cpu::CpuThreadPool pool(1);
  for (auto _ : state) {
    if (path == 0) optimate::cpu::linear(x.data(), w, y.data(), m, false, 1);
    else optimate::cpu::q8_linear(x.data(), packed, y.data(), m, false, pool, isa, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(path == 0 ? "f32 activations" : std::string(optimate::cpu::cpu_isa_name(isa)));
  state.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(state.iterations() * m * in * out) / 1e9,
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_QuantizedLinear)->ArgsProduct({{1, 8, 128}, {0, 1, 2}})->UseRealTime();

// Prefills a 128-token prompt per iteration (logits of the last token only).
void prefill128(benchmark::State& state, CpuModelRunner* runner) {
  const auto table = block_table();
  const auto ids = prompt(128);
  std::vector<float> logits;
  for (auto _ : state) {
    runner->forward({.seqs = {{.token_ids = ids, .block_table = table}}}, logits);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * 128), benchmark::Counter::kIsRate);
}
void BM_Prefill128(benchmark::State& state) {
  if (!model()) return state.SkipWithError((kModel + " not present").c_str());
  prefill128(state, make_runner(state, static_cast<int>(state.range(0)), state.range(1)).get());
}
BENCHMARK(BM_Prefill128)->ArgsProduct({{1, 2}, {0, 1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

// The default path (q8 activations) over KV caches of f32, bf16 and int8 (second argument 0-2).
void BM_DecodeKv(benchmark::State& state) {
  if (!model()) return state.SkipWithError((kModel + " not present").c_str());
  decode(state, make_runner(state, static_cast<int>(state.range(0)), 2, kKvPrecisions[state.range(1)]).get());
}
BENCHMARK(BM_DecodeKv)->ArgsProduct({{1, 2}, {0, 1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();
// The default path from an empty context, positions 0 to 63 over and over: what llama.cpp's
// llama-bench measures with -p 0 -n 64.
void BM_DecodeEmpty(benchmark::State& state) {
  if (!model()) return state.SkipWithError((kModel + " not present").c_str());
  decode(state, make_runner(state, static_cast<int>(state.range(0)), 2, kKvPrecisions[state.range(1)]).get(), 0, 64);
}
BENCHMARK(BM_DecodeEmpty)->ArgsProduct({{1, 2}, {1}})->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_Prefill128Kv(benchmark::State& state) {
  if (!model()) return state.SkipWithError((kModel + " not present").c_str());
  prefill128(state, make_runner(state, static_cast<int>(state.range(0)), 2, kKvPrecisions[state.range(1)]).get());
}
BENCHMARK(BM_Prefill128Kv)->ArgsProduct({{1, 2}, {0, 1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
