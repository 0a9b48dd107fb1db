// GPU performance of the CUDA runner on a model's shape (a Hugging Face config.json) with seeded
// dummy weights, for mixtures of experts and the dense models beside them, printed as JSON:
// batch-1 decode against the device-to-device copy rate applied to the bytes one token reads
// (the weights less the embedding table, of which a step reads its rows, and less the experts
// no token chose: a mixture of experts reads top-k of each layer's experts), batched decode with
// the bytes of the experts a batch is expected to touch (uniform routing), and the time to
// prefill one prompt.
//
//   cuda_moe_bench --model configs/models/qwen3-30b-a3b [--quantization none|fp8]
//                  [--batches 64,256] [--prompt-len 256] [--decode-steps 64] [--prefill-len 2048]
//                  [--out FILE.json]
//
// Timings are host wall clock around synchronous steps (graph replays for decode), medians of
// repeated prefills.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_model_runner.h"
#include "backend/cuda/fp8_weights.h"
#include "cuda_bench_util.h"
#include "cuda_decode_steps.h"
#include "model/weights.h"

using namespace optimate;
using namespace optimate::cuda;

namespace {

// Bytes of one expert's matrices (gate, up, down) as the runner holds them.
double expert_bytes(const ModelConfig& c, bool fp8) {
  const double elems = 3.0 * c.hidden_size * c.moe.expert_intermediate_size;
  return fp8 ? elems + 4.0 * (2 * c.moe.expert_intermediate_size + c.hidden_size) : 2.0 * elems;
}

// Experts per layer a batch of `tokens` touches when each picks top-k uniformly at random.
double expected_experts(const ModelConfig& c, int64_t tokens) {
  if (!c.is_moe()) return 0.0;
  const double e = static_cast<double>(c.moe.num_experts), k = static_cast<double>(c.moe.num_experts_per_tok);
  return e * (1.0 - std::pow(1.0 - k / e, static_cast<double>(tokens)));
}

// Weight bytes a decode step of `tokens` rows reads: all of them but the embedding table's
// other rows (tied: the LM head reads it whole) and the experts no token took.
double step_bytes(const ModelConfig& c, double weight_bytes, bool fp8, int64_t tokens) {
  double bytes = weight_bytes;
  if (!c.tie_word_embeddings) bytes -= 2.0 * c.vocab_size * c.hidden_size - 2.0 * tokens * c.hidden_size;
  if (c.is_moe())
    bytes -= c.num_layers * (c.moe.num_experts - expected_experts(c, tokens)) * expert_bytes(c, fp8);
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, out_path, quantization = "none";
  int64_t prompt_len = 256, decode_steps = 64, prefill_len = 2048;
  std::vector<int64_t> batches = {64, 256};
  const bool flags_ok = bench::parse_flags(
      argc, argv,
      {{"--model", [&](const std::string& v) { model_path = v; }},
       {"--out", [&](const std::string& v) { out_path = v; }},
       {"--quantization", [&](const std::string& v) { quantization = v; }},
       {"--batches", [&](const std::string& v) { batches = bench::parse_list(v); }},
       {"--prompt-len", [&](const std::string& v) { prompt_len = std::stoll(v); }},
       {"--decode-steps", [&](const std::string& v) { decode_steps = std::stoll(v); }},
       {"--prefill-len", [&](const std::string& v) { prefill_len = std::stoll(v); }}});
  if (!flags_ok || model_path.empty()) {
    std::fprintf(stderr, "usage: cuda_moe_bench --model CONFIG_DIR [--quantization none|fp8] [--batches 64,256] ...\n");
    return 2;
  }
  try {
    const ModelConfig c = load_model_header(model_path).config;
    const WeightQuantization q = parse_choice<WeightQuantization>(quantization, "--quantization");
    const bool fp8 = q == WeightQuantization::kFp8;
    nlohmann::json j;
    cudaDeviceProp prop{};
    OPTIMATE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    j["device"] = prop.name;
    j["model"] = model_path;
    j["architecture"] = c.architecture_name;
    j["quantization"] = quantization;
    j["parameters"] = c.num_parameters();
    j["active_parameters"] = c.num_active_parameters();
    const double copy_gbs = bench::copy_bandwidth_gbs();
    j["copy_bandwidth_gb_per_s"] = copy_gbs;

    const auto t_load = bench::Clock::now();
    CudaRunnerOptions o;
    o.quantization = q;
    o.max_num_seqs = std::max<int64_t>(256, *std::max_element(batches.begin(), batches.end()));
    o.max_num_batched_tokens = std::max<int64_t>(8192, prefill_len);
    o.max_model_len = 4096;
    auto runner = CudaModelRunner::with_dummy_weights(c, 0, o);
    const double weight_bytes = static_cast<double>(runner->weight_bytes());
    j["weight_bytes"] = weight_bytes;
    j["load_s"] = bench::seconds_since(t_load);
    j["memory_plan"] = runner->memory_plan().describe();
    const int64_t bs = runner->kv_shape().block_size;
    std::fprintf(stderr, "%s: %.1f GB of weights, loaded in %.1f s\n", model_path.c_str(), weight_bytes / 1e9,
                 j["load_s"].get<double>());

    {
      bench::Seqs s = bench::make_seqs(1, prompt_len, prompt_len + decode_steps + 16, bs, c.vocab_size);
      const double tps = bench::decode_throughput(*runner, s, decode_steps, o.max_num_batched_tokens);
      const double bytes = step_bytes(c, weight_bytes, fp8, 1);
      j["batch1"] = {{"tokens_per_s", tps}, {"ms_per_token", 1e3 / tps}, {"bytes_per_token", bytes},
                     {"gb_per_s", bytes * tps / 1e9}, {"fraction_of_copy_bandwidth", bytes * tps / 1e9 / copy_gbs}};
      std::fprintf(stderr, "batch 1: %.1f tok/s, %.0f%% of copy bandwidth over %.2f GB a token\n", tps,
                   100 * bytes * tps / 1e9 / copy_gbs, bytes / 1e9);
    }
    for (int64_t b : batches) {
      const int64_t steps = std::max<int64_t>(16, decode_steps / 4);
      bench::Seqs s = bench::make_seqs(b, prompt_len, prompt_len + steps + 16, bs, c.vocab_size);
      const double tps = bench::decode_throughput(*runner, s, steps, o.max_num_batched_tokens);
      const double step_s = b / tps, bytes = step_bytes(c, weight_bytes, fp8, b);
      j["batched_decode"].push_back({{"batch", b}, {"output_tokens_per_s", tps}, {"ms_per_step", 1e3 * step_s},
                                     {"expected_experts_per_layer", expected_experts(c, b)},
                                     {"fraction_of_copy_bandwidth", bytes / step_s / 1e9 / copy_gbs}});
      std::fprintf(stderr, "batch %ld: %.0f tok/s (%.2f ms/step)\n", static_cast<long>(b), tps, 1e3 * step_s);
    }
    {
      bench::Seqs p = bench::make_seqs(1, prefill_len, prefill_len, bs, c.vocab_size);
      std::vector<float> logits;
      const ForwardBatch fb{{SeqSlice{p.tokens[0], 0, p.tables[0], true}}};
      runner->forward(fb, logits);
      std::vector<double> ms;
      for (int i = 0; i < 5; ++i) {
        const auto t0 = bench::Clock::now();
        runner->forward(fb, logits);
        ms.push_back(bench::seconds_since(t0) * 1e3);
      }
      // Linear-layer FLOPs: every token through attention's projections, its k experts and the
      // router; the LM head for the one logits row.
      const double active = static_cast<double>(c.num_active_parameters()) -
                            (c.tie_word_embeddings ? 1.0 : 2.0) * c.vocab_size * c.hidden_size;
      const double flops = 2.0 * prefill_len * active + 2.0 * c.hidden_size * c.vocab_size;
      j["prefill"] = {{"tokens", prefill_len}, {"ms", bench::median(ms)},
                      {"linear_tflop_per_s", flops / (bench::median(ms) * 1e-3) / 1e12}};
      std::fprintf(stderr, "prefill %ld tokens: %.1f ms\n", static_cast<long>(prefill_len), bench::median(ms));
    }
    std::printf("%s\n", j.dump(2).c_str());
    bench::write_json(out_path, j);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_moe_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
