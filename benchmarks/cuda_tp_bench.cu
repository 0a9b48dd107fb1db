// Tensor parallelism on the CUDA backend, Llama-3-8B-shaped (or 70B-shaped) dummy weights
// (bf16), printed as JSON: the NCCL all-reduce over every visible GPU (time and bus bandwidth per size, decode's
// sizes among them), then for each tensor-parallel size that the GPUs allow (1 through NCCL as
// well as the one-GPU runner) the decode step time at each batch with graphs, and one eager
// step's time in the collectives (rank 0's stage timer). A size whose ranks do not fit their GPUs
// is recorded with its error.
//
//   cuda_tp_bench [--out FILE.json] [--shape 8b|70b] [--layers N] [--decode-steps N]
//                 [--batches 1,64] [--prompt-len N] [--max-ranks N]
//
// Decode timings use the host clock around synchronous steps (forward_sample, greedy), as the
// engine runs them, so they include each step's broadcast of the step plan to the ranks.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_model_runner.h"
#include "backend/cuda/cuda_tp_runner.h"
#include "backend/cuda/device_buffer.h"
#include "cuda_bench_util.h"
#include "cuda_decode_workload.h"
#if OPTIMATE_HAVE_NCCL
#include "backend/cuda/nccl_communicator.h"
#endif

using namespace optimate;
using namespace optimate::cuda;
using bench::llama3_70b;
using bench::llama3_8b;
using bench::make_seqs;
using bench::prefill_all;
using bench::Seqs;
using bench::Clock;
using bench::seconds_since;

namespace {

#if OPTIMATE_HAVE_NCCL
// ncclAllReduce of fp32 over `n` GPUs, one thread a rank: microseconds per call (the slowest
// rank's mean over `iters` back-to-back calls) and NCCL's bus bandwidth, 2 (n-1)/n bytes / time.
nlohmann::json nccl_all_reduce(int n) {
  std::vector<int> devices(n);
  for (int i = 0; i < n; ++i) devices[i] = i;
  auto comms = make_nccl_communicators(devices);
  nlohmann::json out = nlohmann::json::array();
  for (int64_t bytes : {int64_t{16} << 10, int64_t{512} << 10, int64_t{4} << 20, int64_t{64} << 20, int64_t{256} << 20}) {
    const size_t count = static_cast<size_t>(bytes / 4);
    const int iters = bytes >= (int64_t{64} << 20) ? 20 : 200;
    std::vector<double> seconds(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        OPTIMATE_CUDA_CHECK(cudaSetDevice(r));
        DeviceBuffer<float> data(count);
        OPTIMATE_CUDA_CHECK(cudaMemset(data.get(), 0, data.bytes()));
        cudaStream_t s = nullptr;
        OPTIMATE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        for (int i = 0; i < 5; ++i) comms[r]->all_reduce_sum_async(data.get(), count, s);
        OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(s));
        comms[r]->barrier();
        const auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) comms[r]->all_reduce_sum_async(data.get(), count, s);
        OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(s));
        seconds[r] = seconds_since(t0) / iters;
        OPTIMATE_CUDA_CHECK(cudaStreamDestroy(s));
      });
    for (auto& t : threads) t.join();
    const double t = *std::max_element(seconds.begin(), seconds.end());
    out.push_back({{"bytes", bytes}, {"us", t * 1e6}, {"algbw_gb_per_s", bytes / t / 1e9},
                   {"busbw_gb_per_s", bytes * 2.0 * (n - 1) / n / t / 1e9}});
    std::fprintf(stderr, "all-reduce %lld bytes over %d GPUs: %.1f us\n", static_cast<long long>(bytes), n, t * 1e6);
  }
  return out;
}
#endif

// `n` greedy decode steps of the whole batch through forward_sample, each token fed back.
void decode_steps(ModelRunner& runner, Seqs& s, int64_t n) {
  const int64_t batch = s.tokens.size();
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const std::vector<SampleSpec> rows(static_cast<size_t>(batch), SampleSpec{.params = &greedy});
  std::vector<int32_t> out;
  std::vector<std::vector<int32_t>> one(batch);
  for (int64_t k = 0; k < n; ++k) {
    ForwardBatch d;
    for (int64_t i = 0; i < batch; ++i) {
      one[i] = {s.tokens[i].back()};
      d.seqs.push_back({one[i], int64_t(s.tokens[i].size()) - 1, s.tables[i], true});
    }
    if (!runner.forward_sample(d, rows, out)) throw std::runtime_error("the runner does not sample on the GPU");
    for (int64_t i = 0; i < batch; ++i) s.tokens[i].push_back(out[i]);
  }
}

// Decode at each batch: graph steps timed by the host clock, then a few eager steps with the
// stage timers on for rank 0's time in collectives. Every rank times (so every rank runs eagerly:
// a graph step pads the batch, and ranks must all-reduce the same rows).
nlohmann::json measure_decode(ModelRunner& runner, const std::vector<CudaModelRunner*>& ranks, const ModelConfig& c,
                              const std::vector<int64_t>& batches, int64_t prompt_len, int64_t steps,
                              int64_t max_tokens) {
  CudaModelRunner& rank0 = *ranks[0];
  nlohmann::json out = nlohmann::json::array();
  for (int64_t b : batches) {
    Seqs s = make_seqs(b, prompt_len, prompt_len + steps + 32, runner.kv_shape().block_size, c.vocab_size);
    prefill_all(runner, s, max_tokens);
    decode_steps(runner, s, 3);
    const auto t0 = Clock::now();
    decode_steps(runner, s, steps);
    const double step_s = seconds_since(t0) / steps;
    for (CudaModelRunner* r : ranks) r->set_stage_timing(true);
    decode_steps(runner, s, 8);
    for (CudaModelRunner* r : ranks) r->set_stage_timing(false);
    for (size_t r = 1; r < ranks.size(); ++r) ranks[r]->take_stage_times();
    int64_t timed = 0;
    double eager_ms = 0.0, collective_ms = 0.0;
    for (const auto& [stage, ms] : rank0.take_stage_times(&timed)) {
      eager_ms += ms;
      if (stage == "collectives") collective_ms = ms;
    }
    timed = std::max<int64_t>(timed, 1);
    out.push_back({{"batch", b}, {"ms_per_step", step_s * 1e3}, {"output_tokens_per_s", b / step_s},
                   {"eager_ms_per_step", eager_ms / timed}, {"collectives_ms_per_step", collective_ms / timed}});
    std::fprintf(stderr, "  batch %lld: %.3f ms/step (eager %.3f, collectives %.3f)\n", static_cast<long long>(b),
                 step_s * 1e3, eager_ms / timed, collective_ms / timed);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t layers = 0, steps = 64, prompt_len = 128, max_ranks = 0;
  std::vector<int64_t> batches = {1, 64};
  std::string out_path, shape = "8b";
  const bool flags_ok = bench::parse_flags(
      argc, argv,
      {{"--out", [&](const std::string& v) { out_path = v; }},
       {"--shape", [&](const std::string& v) { shape = v; }},
       {"--layers", [&](const std::string& v) { layers = std::stoll(v); }},
       {"--decode-steps", [&](const std::string& v) { steps = std::stoll(v); }},
       {"--prompt-len", [&](const std::string& v) { prompt_len = std::stoll(v); }},
       {"--max-ranks", [&](const std::string& v) { max_ranks = std::stoll(v); }},
       {"--batches", [&](const std::string& v) { batches = bench::parse_list(v); }}});
  if (!flags_ok) return 2;
  try {
    nlohmann::json j;
    const int gpus = cuda_device_count();
    if (gpus == 0) throw std::runtime_error("no GPU visible");
    const int most = static_cast<int>(max_ranks > 0 ? std::min<int64_t>(max_ranks, gpus) : gpus);
    cudaDeviceProp prop{};
    OPTIMATE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    j["device"] = prop.name;
    j["gpus"] = gpus;
    if (shape != "8b" && shape != "70b") throw std::runtime_error("--shape: 8b or 70b, got " + shape);
    const ModelConfig c = shape == "8b" ? llama3_8b(layers > 0 ? layers : 32) : llama3_70b(layers > 0 ? layers : 80);
    j["shape"] = "llama-3-" + shape;
    j["layers"] = c.num_layers;
#if OPTIMATE_HAVE_NCCL
    if (most >= 2) j["nccl_all_reduce"] = nccl_all_reduce(most);
#endif
    CudaRunnerOptions o;
    o.max_num_seqs = *std::max_element(batches.begin(), batches.end());
    o.max_num_batched_tokens = 8192;
    o.max_model_len = 2048;
    nlohmann::json runs = nlohmann::json::array();
    // A run whose model does not fit (70B on one GPU) is recorded with its error.
    auto attempt = [&](nlohmann::json run, const std::function<nlohmann::json()>& measure) {
      try {
        run["decode"] = measure();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "  %s\n", e.what());
        run["error"] = e.what();
      }
      runs.push_back(run);
    };
    std::fprintf(stderr, "one GPU (no split)\n");
    attempt({{"tp", 1}, {"communicator", "none"}}, [&] {
      auto one = CudaModelRunner::with_dummy_weights(c, 0, o);
      return measure_decode(*one, {one.get()}, c, batches, prompt_len, steps, o.max_num_batched_tokens);
    });
#if OPTIMATE_HAVE_NCCL
    for (int tp = 1; tp <= most; tp *= 2) {
      std::fprintf(stderr, "TP=%d over NCCL\n", tp);
      attempt({{"tp", tp}, {"communicator", "nccl"}}, [&] {
        auto runner = make_cuda_tp_runner(c, nullptr, 0, o, {.num_ranks = tp});
        std::vector<CudaModelRunner*> ranks;
        for (int r = 0; r < tp; ++r) ranks.push_back(&dynamic_cast<CudaModelRunner&>(runner->rank(r)));
        return measure_decode(*runner, ranks, c, batches, prompt_len, steps, o.max_num_batched_tokens);
      });
    }
#endif
    j["runs"] = runs;
    const std::string text = j.dump(2);
    std::printf("%s\n", text.c_str());
    if (!out_path.empty()) {
      FILE* f = std::fopen(out_path.c_str(), "w");
      if (!f) throw std::runtime_error("cannot write " + out_path);
      std::fputs(text.c_str(), f);
      std::fclose(f);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_tp_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
