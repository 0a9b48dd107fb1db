// GPU sampling cost at the Llama-3 vocabulary (128256), per decode step, printed as JSON: the
// fused kernel (sampling.h) against the unfused baseline (softmax, segmented sort, cumsum, cut,
// draw) and plain greedy argmax, at batch 1, 64 and 256, for a few parameter sets. Logits are
// seeded N(0, 2^2) draws, rotated over 4 copies so large batches do not sit in L2.
//
//   cuda_sampling_bench [--out FILE.json] [--reps N]
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda_bench_util.h"
#include "backend/cuda/argmax.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling.h"

using namespace optimate;
using namespace optimate::cuda;

namespace {

constexpr int64_t kVocab = 128256;
constexpr int kCopies = 4;

template <typename Fn>
double median_us(Fn fn, int reps) {
  return 1000.0 * bench::time_events_ms(fn, reps, 3);
}

struct ParamSet {
  const char* name;
  SamplingParams params;
};

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  int reps = 30;
  if (!bench::parse_flags(argc, argv,
                          {{"--out", [&](const std::string& v) { out_path = v; }},
                           {"--reps", [&](const std::string& v) { reps = std::stoi(v); }}}))
    return 2;
  const std::vector<int64_t> batches = {1, 64, 256};
  const int64_t max_rows = batches.back();
  std::vector<float> host(static_cast<size_t>(max_rows * kVocab));
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (auto& x : host) x = dist(rng);
  std::vector<DeviceBuffer<float>> logits;
  for (int c = 0; c < kCopies; ++c) {
    logits.emplace_back(host.size());
    std::rotate(host.begin(), host.begin() + 977, host.end());
    OPTIMATE_CUDA_CHECK(cudaMemcpy(logits.back().get(), host.data(), host.size() * sizeof(float),
                                   cudaMemcpyHostToDevice));
  }
  auto make = [](float t, int64_t k, float p, float mp) {
    SamplingParams s;
    s.temperature = t;
    s.top_k = k;
    s.top_p = p;
    s.min_p = mp;
    return s;
  };
  const std::vector<ParamSet> sets = {
      {"top_k50_top_p0.9_t0.8", make(0.8f, 50, 0.9f, 0.0f)},
      {"top_p0.95_t1", make(1.0f, -1, 0.95f, 0.0f)},
      {"min_p0.05_t1", make(1.0f, -1, 1.0f, 0.05f)},
      {"t1_untruncated", make(1.0f, -1, 1.0f, 0.0f)},
  };
  UnfusedSampler unfused(max_rows, kVocab);
  DeviceBuffer<int32_t> tokens(max_rows);
  DeviceBuffer<float> thresholds(max_rows);
  DeviceBuffer<GpuSampleRow> rows(max_rows);
  nlohmann::json results = nlohmann::json::array();
  for (int64_t batch : batches) {
    nlohmann::json entry;
    entry["batch"] = batch;
    entry["argmax_us"] = median_us([&](int i) {
      argmax_rows(logits[i % kCopies].get(), tokens.get(), batch, kVocab, nullptr);
    }, reps);
    for (const ParamSet& s : sets) {
      std::vector<GpuSampleRow> host_rows;
      for (int64_t r = 0; r < batch; ++r) host_rows.push_back(make_sample_row(s.params, 7 + r, 0));
      OPTIMATE_CUDA_CHECK(cudaMemcpy(rows.get(), host_rows.data(), batch * sizeof(GpuSampleRow),
                                     cudaMemcpyHostToDevice));
      const double fused = median_us([&](int i) {
        sample_rows_fused(logits[i % kCopies].get(), rows.get(), tokens.get(), nullptr, batch, kVocab, nullptr);
      }, reps);
      const double base = median_us([&](int i) {
        unfused.sample(logits[i % kCopies].get(), rows.get(), tokens.get(), thresholds.get(), batch, nullptr);
      }, reps);
      entry["fused_us"][s.name] = fused;
      entry["unfused_us"][s.name] = base;
      std::fprintf(stderr, "batch %3lld %-24s fused %8.1f us  unfused %9.1f us  (%.1fx)\n",
                   static_cast<long long>(batch), s.name, fused, base, base / fused);
    }
    results.push_back(entry);
  }
  nlohmann::json j;
  j["vocab"] = kVocab;
  j["logits_bytes_per_row"] = kVocab * 4;
  j["sampling"] = results;
  std::printf("%s\n", j.dump(1).c_str());
  try {
    bench::write_json(out_path, j);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_sampling_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
