// GPU performance of the CUDA runner on Llama-3-8B-shaped dummy weights (bf16), printed as
// JSON: device-to-device copy bandwidth (the roofline for decode), each decode GEMM's
// achieved bandwidth, batch-1 decode tokens/s (graph replay and eager) with its share of the
// copy bandwidth, batched decode throughput, and the time to prefill one 2048-token prompt.
//
//   cuda_decode_bench [--out FILE.json] [--layers N] [--decode-steps N] [--batches 64,256]
//                     [--prompt-len N] [--quantization none|fp8] [--quick 1] [--elementwise 1]
//                     [--only gemv|batch1] [--gemv-kernels pairs,mma,mma-deep] [--gemv-rows 1,2,4,8]
//
// --only batch1 measures batch-1 decode alone (batch1_graph and batch1_graph_overlap, as the
// runner serves) and stops there.
//
// --only gemv measures the copy rate and the decode GEMV kernels alone (cuda_gemv_kernels_bench.h:
// every kernel named by --gemv-kernels, bf16 and FP8 weights, each projection plain and fused,
// the --gemv-rows row counts, the splits of k, the model's weight-streaming chain; then the FP8
// linear sweep with cuBLASLt beside the GEMV up to kFp8GemvMaxRows rows) and stops there.
//
// --quantization fp8 runs the same model with FP8 linear layers (weights quantized on the GPU
// at load) and adds fp8_gemms, each projection through the FP8 path against bf16. --quick 1
// skips the bf16 kernel sweeps, the batch-1 variants other than batch1_graph and the
// small-batch fused/unfused comparison. --elementwise 1 runs only the GEMM path's elementwise
// kernels, current against baseline (cuda_elementwise_bench.h): each kernel at 2048 and 8192
// rows, then the prefill breakdowns with bf16 and with FP8 weights (--quantization is ignored).
//
// Timings are medians of repeated runs after warm-up; decode timings use the host clock
// around synchronous steps, so they include the host work of each step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_model_runner.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernel_paths.h"
#include "cuda_breakdown_bench.h"
#include "cuda_decode_steps.h"
#include "cuda_decode_workload.h"
#include "cuda_elementwise_bench.h"
#include "cuda_fp8_gemm_bench.h"
#include "cuda_gemv_bench.h"
#include "cuda_gemv_kernels_bench.h"

using namespace optimate;
using namespace optimate::cuda;
using bench::llama3_8b;
using bench::make_seqs;
using bench::prefill_all;
using bench::Seqs;
using bench::Clock;
using bench::seconds_since;
using bench::decode_steps;
using bench::decode_throughput;

namespace {

nlohmann::json gemm_bandwidth(const ModelConfig& c) {
  Gemm gemm;
  nlohmann::json out = nlohmann::json::array();
  struct Shape { const char* name; int64_t n, k; };
  const int64_t qkv = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
  for (const Shape& s : {Shape{"qkv", qkv, c.hidden_size}, Shape{"o", c.hidden_size, c.num_heads * c.head_dim},
                         Shape{"gate_up", 2 * c.intermediate_size, c.hidden_size},
                         Shape{"down", c.hidden_size, c.intermediate_size}, Shape{"lm_head", c.vocab_size, c.hidden_size}}) {
    // Several weight copies so consecutive runs do not hit a warm L2.
    const int copies = 4;
    DeviceBuffer<__nv_bfloat16> w(copies * s.n * s.k), x(256 * s.k), y(256 * s.n);
    OPTIMATE_CUDA_CHECK(cudaMemset(w.get(), 0x3c, w.bytes()));
    OPTIMATE_CUDA_CHECK(cudaMemset(x.get(), 0x3c, x.bytes()));
    for (int64_t m : {0, 1, 4, 64, 256}) {
      // m = 0 stands for one row through cuBLASLt, to compare with the small-m kernel.
      const bool cublas_only = m == 0;
      gemm.set_small_m_kernel(!cublas_only);
      if (cublas_only) m = 1;
      int i = 0;
      const double ms = bench::time_events_ms([&](int) {
        gemm.linear(x.get(), w.get() + (i++ % copies) * s.n * s.k, nullptr, y.get(), GemmOutput::kBf16, m, s.n, s.k, nullptr);
      }, 20);
      const double bytes = 2.0 * (s.n * s.k + m * s.k + m * s.n);
      out.push_back({{"gemm", s.name}, {"m", m}, {"path", cublas_only || m > 8 ? "cublaslt" : "gemv"}, {"n", s.n}, {"k", s.k}, {"us", ms * 1e3},
                     {"gb_per_s", bytes / (ms * 1e-3) / 1e9}, {"tflop_per_s", 2.0 * m * s.n * s.k / (ms * 1e-3) / 1e12}});
    }
  }
  gemm.set_small_m_kernel(true);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t layers = 32, num_decode_steps = 128, prompt_len = 256, prefill_len = 2048;
  std::vector<int64_t> batches = {64, 256, 1024};
  std::string out_path, quantization = "none", only;
  std::string gemv_kernel_names = "pairs,mma,mma-deep";
  std::vector<int64_t> gemv_rows = {1, 2, 4, 8};
  bool quick = false, elementwise = false;
  const bool flags_ok = bench::parse_flags(
      argc, argv,
      {{"--out", [&](const std::string& v) { out_path = v; }},
       {"--layers", [&](const std::string& v) { layers = std::stoll(v); }},
       {"--decode-steps", [&](const std::string& v) { num_decode_steps = std::stoll(v); }},
       {"--prompt-len", [&](const std::string& v) { prompt_len = std::stoll(v); }},
       {"--batches", [&](const std::string& v) { batches = bench::parse_list(v); }},
       {"--quantization", [&](const std::string& v) { quantization = v; }},
       {"--quick", [&](const std::string& v) { quick = v != "0"; }},
       {"--elementwise", [&](const std::string& v) { elementwise = v != "0"; }},
       {"--only", [&](const std::string& v) { only = v; }},
       {"--gemv-kernels", [&](const std::string& v) { gemv_kernel_names = v; }},
       {"--gemv-rows", [&](const std::string& v) { gemv_rows = bench::parse_list(v); }}});
  if (!flags_ok) return 2;
  try {
    nlohmann::json j;
    cudaDeviceProp prop{};
    OPTIMATE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    j["device"] = prop.name;
    j["sms"] = prop.multiProcessorCount;
    j["kernel_paths"] = device_kernel_paths().describe();
    const double copy_gbs = bench::copy_bandwidth_gbs();
    j["copy_bandwidth_gb_per_s"] = copy_gbs;
    const ModelConfig c = llama3_8b(layers);
    if (only == "gemv") {
      std::vector<GemvKernel> gemv_kernels;
      for (size_t p = 0; p <= gemv_kernel_names.size();) {
        const size_t q = std::min(gemv_kernel_names.find(',', p), gemv_kernel_names.size());
        gemv_kernels.push_back(parse_gemv_kernel(gemv_kernel_names.substr(p, q - p)));
        p = q + 1;
      }
      std::printf("copy %.0f GB/s\n", copy_gbs);
      j["gemv_kernels"] = bench::gemv_kernel_sweep(c, copy_gbs, gemv_kernels, gemv_rows);
      j["gemv_kernel_chain"] = bench::gemv_kernel_chain(c, copy_gbs, gemv_kernels);
      j["fp8_gemms"] = bench::fp8_gemm_sweep(c);
      std::printf("%s\n", j.dump(2).c_str());
      bench::write_json(out_path, j);
      return 0;
    }
    if (!only.empty() && only != "batch1") throw std::invalid_argument("--only " + only + " (gemv, batch1)");
    if (only == "batch1") quick = true;
    // The GEMM ceiling of the breakdowns: the measured 8192^3 bf16 rate of this workplace's
    // H200 (REFERENCE.md).
    constexpr double kGemmTflops = 790.0;
    if (elementwise) {
      j["elementwise_kernels"] = bench::elementwise_kernel_sweep(c, copy_gbs);
      for (WeightQuantization q : {WeightQuantization::kNone, WeightQuantization::kFp8})
        j["elementwise_prefill"][std::string(choice_name(q))] =
            bench::elementwise_prefill_ab(c, q, prefill_len, copy_gbs, kGemmTflops);
      std::printf("%s\n", j.dump(2).c_str());
      bench::write_json(out_path, j);
      return 0;
    }
    const WeightQuantization weight_quantization = parse_choice<WeightQuantization>(quantization, "--quantization");
    j["quantization"] = quantization;
    if (!quick) {
      j["gemms"] = gemm_bandwidth(c);
      std::fprintf(stderr, "copy %.0f GB/s; gemms done\n", copy_gbs);
      j["gemv_splits"] = bench::gemv_split_sweep(c);
      j["gemv_model_chain"] = bench::gemv_model_chain(c);
      std::fprintf(stderr, "gemv sweep done\n");
    }
    if (weight_quantization == WeightQuantization::kFp8) {
      j["fp8_gemms"] = bench::fp8_gemm_sweep(c);
      std::fprintf(stderr, "fp8 gemm sweep done\n");
    }

    const auto t_load = Clock::now();
    CudaWeights weights = make_dummy_weights(c, 0);
    j["dummy_weights_s"] = seconds_since(t_load);
    CudaRunnerOptions o;
    o.quantization = weight_quantization;
    o.max_num_seqs = 1024;
    o.max_num_batched_tokens = 8192;
    o.max_model_len = 4096;
    o.fused_decode_max_rows = kGemvMaxRows;  // lets the small-batch sweep below compare both paths
    CudaModelRunner runner(std::move(weights), o);
    // FP8 weights are quantized in the constructor, so the bytes a step streams are known here.
    const double weight_bytes = static_cast<double>(runner.weight_bytes());
    j["weight_bytes"] = weight_bytes;
    j["load_s"] = seconds_since(t_load);
    j["memory_plan"] = runner.memory_plan().describe();
    const int64_t bs = runner.kv_shape().block_size;

    // Batch 1: the default (graphs, fused small-step path, programmatic launch), then each
    // feature off in turn; "batch1_graph_unfused" is the launch sequence before fusion.
    // "batch1_graph_overlap" launches each step before collecting the last (async_scheduling).
    struct Variant { const char* key; bool graphs, fused, pdl, overlap; };
    for (const Variant& v : {Variant{"batch1_graph", true, true, true, false},
                             Variant{"batch1_graph_overlap", true, true, true, true},
                             Variant{"batch1_graph_no_pdl", true, true, false, false},
                             Variant{"batch1_graph_unfused_pdl", true, false, true, false},
                             Variant{"batch1_graph_unfused", true, false, false, false},
                             Variant{"batch1_eager", false, true, true, false}}) {
      if (quick && std::string(v.key) != "batch1_graph" && std::string(v.key) != "batch1_graph_overlap") continue;
      runner.set_cuda_graphs(v.graphs);
      runner.set_launch_options(v.fused, v.pdl);
      Seqs s = make_seqs(1, prompt_len, prompt_len + num_decode_steps + 16, bs, c.vocab_size);
      const double tps = decode_throughput(runner, s, num_decode_steps, o.max_num_batched_tokens, v.overlap);
      const std::string key = v.key;
      j[key]["tokens_per_s"] = tps;
      j[key]["ms_per_token"] = 1e3 / tps;
      j[key]["weight_gb_per_s"] = weight_bytes * tps / 1e9;
      j[key]["fraction_of_copy_bandwidth"] = weight_bytes * tps / 1e9 / copy_gbs;
      std::fprintf(stderr, "%s: %.1f tok/s\n", key.c_str(), tps);
    }
    if (only == "batch1") {
      std::printf("%s\n", j.dump(2).c_str());
      bench::write_json(out_path, j);
      return 0;
    }
    // Small batches with the fused decode layer on and off (this runner fuses up to
    // kGemvMaxRows rows; the default is CudaRunnerOptions::fused_decode_max_rows).
    runner.set_cuda_graphs(true);
    for (int64_t b : {int64_t{2}, int64_t{3}, int64_t{4}, int64_t{8}}) {
      if (quick) break;
      for (bool fused : {true, false}) {
        runner.set_launch_options(fused, true);
        Seqs s = make_seqs(b, prompt_len, prompt_len + 64, bs, c.vocab_size);
        const double tps = decode_throughput(runner, s, 32, o.max_num_batched_tokens);
        j["small_batch_fused"].push_back({{"batch", b}, {"fused", fused}, {"ms_per_step", 1e3 * b / tps}});
        std::fprintf(stderr, "batch %ld %s: %.2f ms/step\n", static_cast<long>(b), fused ? "fused" : "unfused",
                     1e3 * b / tps);
      }
    }
    runner.set_cuda_graphs(true);
    runner.set_launch_options(true, true);
    for (int64_t b : batches) {
      const int64_t steps = std::max<int64_t>(16, num_decode_steps / 4);
      Seqs s = make_seqs(b, prompt_len, prompt_len + steps + 16, bs, c.vocab_size);
      const double tps = decode_throughput(runner, s, steps, o.max_num_batched_tokens);
      Seqs so = make_seqs(b, prompt_len, prompt_len + steps + 16, bs, c.vocab_size);
      const double tps_overlap = decode_throughput(runner, so, steps, o.max_num_batched_tokens, true);
      j["batched_decode"].push_back({{"batch", b}, {"context", prompt_len}, {"output_tokens_per_s", tps},
                                     {"ms_per_step", 1e3 * b / tps}, {"overlapped_output_tokens_per_s", tps_overlap}});
      std::fprintf(stderr, "batch %ld: %.0f tok/s, overlapped %.0f\n", static_cast<long>(b), tps, tps_overlap);
    }

    // Where a step's time goes: eager steps with an event between stages.
    for (int64_t b : {int64_t{1}, int64_t{64}, int64_t{256}, int64_t{1024}}) {
      Seqs s = make_seqs(b, prompt_len, prompt_len + 32, bs, c.vocab_size);
      prefill_all(runner, s, o.max_num_batched_tokens);
      decode_steps(runner, s, 2);
      j["breakdown"]["decode_batch_" + std::to_string(b)] = bench::stage_breakdown(
          runner, c, [&] { decode_steps(runner, s, 1); }, 8, double(b), double(b), copy_gbs, kGemmTflops);
      std::fprintf(stderr, "breakdown batch %ld done\n", static_cast<long>(b));
    }
    {
      Seqs p = make_seqs(1, prefill_len, prefill_len, bs, c.vocab_size);
      std::vector<float> lg;
      const ForwardBatch fb{{SeqSlice{p.tokens[0], 0, p.tables[0], true}}};
      j["breakdown"]["prefill_" + std::to_string(prefill_len)] = bench::stage_breakdown(
          runner, c, [&] { runner.forward(fb, lg); }, 3, double(prefill_len), 1.0, copy_gbs, kGemmTflops);
      Seqs mixed = make_seqs(32, prefill_len / 8, prefill_len / 8, bs, c.vocab_size);
      ForwardBatch mb;
      for (int64_t i = 0; i < 32; ++i) mb.seqs.push_back({mixed.tokens[i], 0, mixed.tables[i], true});
      j["breakdown"]["prefill_32x" + std::to_string(prefill_len / 8)] = bench::stage_breakdown(
          runner, c, [&] { runner.forward(mb, lg); }, 3, double(prefill_len * 4), 32.0, copy_gbs, kGemmTflops);
    }

    // Prefill of one prompt.
    Seqs p = make_seqs(1, prefill_len, prefill_len, bs, c.vocab_size);
    std::vector<float> logits;
    const ForwardBatch fb{{SeqSlice{p.tokens[0], 0, p.tables[0], true}}};
    runner.forward(fb, logits);
    std::vector<double> ms;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = Clock::now();
      runner.forward(fb, logits);
      ms.push_back(seconds_since(t0) * 1e3);
    }
    const double params = static_cast<double>(cuda_weight_bytes(c)) / 2;  // counted in bf16
    const double prefill_flops = 2.0 * prefill_len * (params - 2.0 * c.vocab_size * c.hidden_size) +
                                 2.0 * c.hidden_size * c.vocab_size;
    j["prefill"] = {{"tokens", prefill_len}, {"ms", bench::median(ms)},
                    {"linear_tflop_per_s", prefill_flops / (bench::median(ms) * 1e-3) / 1e12}};
    std::printf("%s\n", j.dump(2).c_str());
    bench::write_json(out_path, j);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_decode_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
