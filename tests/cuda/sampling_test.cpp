// The GPU samplers (fused kernel and unfused baseline) against the CPU sampler, the
// specification: the same seed and logits give the same token, except where a draw or a top-p
// cut falls within float rounding of a boundary (the two sum weights in different orders);
// each such case is checked to be one. Also: exact top-k and min-p kept sets, greedy rows,
// batch independence, and the parameters the GPU path refuses.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "sampling/sampler.h"
#include "backend/cuda/sampling.h"
#include "sampling/rng.h"
#include "core/error.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;

std::vector<float> random_logits(int64_t rows, int64_t vocab, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> l(rows * vocab);
  for (auto& x : l) x = dist(rng);
  return l;
}

struct Case {
  const char* name;
  SamplingParams params;
  float logit_scale;
  bool exact_kept_set;  // no top-p: the kept set is an exact threshold on both sides
};

std::vector<Case> cases() {
  auto make = [](float t, int64_t k, float p, float mp) {
    SamplingParams s;
    s.temperature = t;
    s.top_k = k;
    s.top_p = p;
    s.min_p = mp;
    return s;
  };
  return {
      {"top_k_50", make(0.7f, 50, 1.0f, 0.0f), 3.0f, true},
      {"top_p_0.9", make(1.0f, -1, 0.9f, 0.0f), 3.0f, false},
      {"top_k_top_p_min_p", make(0.8f, 100, 0.95f, 0.02f), 2.0f, false},
      {"min_p_0.1", make(1.3f, -1, 1.0f, 0.1f), 3.0f, true},
      {"untruncated_peaked", make(0.5f, -1, 1.0f, 0.0f), 4.0f, true},
      {"top_p_flat", make(1.0f, -1, 0.5f, 0.0f), 0.5f, false},
      {"top_k_1000_top_p", make(1.0f, 1000, 0.8f, 0.0f), 1.0f, false},
  };
}

class SamplingVsCpu : public ::testing::TestWithParam<int64_t> {};

TEST_P(SamplingVsCpu, SameSeedSameTokenAsCpuSampler) {
  OPTIMATE_REQUIRE_GPU();
  const int64_t vocab = GetParam();
  constexpr int64_t kLogitRows = 6;
  constexpr int64_t kSeedsPerRow = 12;
  constexpr int64_t kRows = kLogitRows * kSeedsPerRow;
  UnfusedSampler unfused(kRows, vocab);
  sampling::Sampler cpu_sampler(vocab);
  int64_t draws = 0, boundary_mismatches = 0;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::vector<float> base = random_logits(kLogitRows, vocab, c.logit_scale, 7 + vocab);
    std::vector<float> logits(kRows * vocab);
    std::vector<GpuSampleRow> rows(kRows);
    for (int64_t r = 0; r < kRows; ++r) {
      std::copy_n(base.begin() + (r / kSeedsPerRow) * vocab, vocab, logits.begin() + r * vocab);
      rows[r] = make_sample_row(c.params, 1000 + 17 * r, r % 5);
    }
    auto d_logits = upload(logits);
    auto d_rows = upload(rows);
    DeviceBuffer<int32_t> d_fused(kRows), d_unfused(kRows);
    DeviceBuffer<float> d_fused_thr(kRows), d_unfused_thr(kRows);
    sample_rows_fused(d_logits.get(), d_rows.get(), d_fused.get(), d_fused_thr.get(), kRows, vocab, nullptr);
    unfused.sample(d_logits.get(), d_rows.get(), d_unfused.get(), d_unfused_thr.get(), kRows, nullptr);
    const auto fused = download(d_fused.get(), kRows);
    const auto unf = download(d_unfused.get(), kRows);
    const auto fused_thr = download(d_fused_thr.get(), kRows);
    const auto unf_thr = download(d_unfused_thr.get(), kRows);

    std::vector<float> probs;
    for (int64_t r = 0; r < kRows; ++r) {
      sampling::SampleInput in;
      in.logits = std::span<const float>(logits.data() + r * vocab, vocab);
      in.params = &c.params;
      in.seed = rows[r].seed;
      in.output_index = static_cast<int64_t>(rows[r].output_index);
      const int32_t want = cpu_sampler.sample(in).token_id;
      cpu_sampler.distribution(in, probs);
      // Kept sets: ids with z >= the GPU threshold against the CPU's support.
      for (const auto* thr : {&fused_thr, &unf_thr}) {
        int64_t differ = 0;
        for (int64_t i = 0; i < vocab; ++i) {
          const float z = in.logits[i] / c.params.temperature;
          differ += (z >= (*thr)[r]) != (probs[i] > 0.0f);
        }
        if (c.exact_kept_set) EXPECT_EQ(differ, 0) << "row " << r;
        else  // fp32 cumulative sums over many near-equal weights may move a top-p cut a little
          EXPECT_LE(differ, 1 + vocab / 1000) << "row " << r;
      }
      const float u = sampling_uniform(in.seed, in.output_index);
      for (int32_t got : {fused[r], unf[r]}) {
        ++draws;
        ASSERT_GE(got, 0);
        ASSERT_LT(got, vocab);
        if (got == want) continue;
        // Only a draw within rounding of the CDF step between the two tokens may differ.
        const int32_t lo = std::min(got, want);
        double cdf = 0.0;
        for (int32_t i = 0; i <= lo; ++i) cdf += probs[i];
        EXPECT_NEAR(u, cdf, 5e-4) << "row " << r << ": GPU drew " << got << ", CPU " << want;
        ++boundary_mismatches;
      }
    }
  }
  // Flat rows put many ids within rounding of u; peaked ones almost never.
  EXPECT_LE(boundary_mismatches * 20, draws) << boundary_mismatches << " of " << draws;
  std::printf("vocab %lld: %lld of %lld GPU draws differ from the CPU sampler, all at rounding boundaries\n",
              static_cast<long long>(vocab), static_cast<long long>(boundary_mismatches),
              static_cast<long long>(draws));
}

INSTANTIATE_TEST_SUITE_P(Vocab, SamplingVsCpu, ::testing::Values(1001, 32000, 128256));

TEST(Sampling, GreedyRowsAreArgmaxWithLowestIdOnTies) {
  OPTIMATE_REQUIRE_GPU();
  constexpr int64_t kVocab = 50000, kRows = 3;
  std::vector<float> logits = random_logits(kRows, kVocab, 1.0f, 3);
  logits[0 * kVocab + 777] = 9.0f;
  logits[0 * kVocab + 4000] = 9.0f;  // tie: 777 wins
  logits[1 * kVocab + kVocab - 1] = 9.0f;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams top1;
  top1.top_k = 1;
  std::vector<GpuSampleRow> rows = {make_sample_row(greedy, 1, 0), make_sample_row(greedy, 2, 0),
                                    make_sample_row(top1, 3, 0)};
  auto d_logits = upload(logits);
  auto d_rows = upload(rows);
  DeviceBuffer<int32_t> d_tokens(kRows);
  DeviceBuffer<float> d_thr(kRows);
  sample_rows_fused(d_logits.get(), d_rows.get(), d_tokens.get(), nullptr, kRows, kVocab, nullptr);
  const auto fused = download(d_tokens.get(), kRows);
  UnfusedSampler unfused(kRows, kVocab);
  unfused.sample(d_logits.get(), d_rows.get(), d_tokens.get(), d_thr.get(), kRows, nullptr);
  const auto unf = download(d_tokens.get(), kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    const auto begin = logits.begin() + r * kVocab;
    const int32_t want = int32_t(std::max_element(begin, begin + kVocab) - begin);
    EXPECT_EQ(fused[r], want) << "row " << r;
    EXPECT_EQ(unf[r], want) << "row " << r;
  }
  EXPECT_EQ(fused[0], 777);
}

TEST(Sampling, SeededRowGivesSameTokenAloneOrInBatchAndEveryRun) {
  OPTIMATE_REQUIRE_GPU();
  constexpr int64_t kVocab = 128256, kRows = 64;
  const std::vector<float> logits = random_logits(kRows, kVocab, 2.0f, 11);
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.9f;
  p.top_k = 200;
  std::vector<GpuSampleRow> rows;
  for (int64_t r = 0; r < kRows; ++r) rows.push_back(make_sample_row(p, 42 + r, 3 * r));
  auto d_logits = upload(logits);
  auto d_rows = upload(rows);
  DeviceBuffer<int32_t> d_tokens(kRows);
  sample_rows_fused(d_logits.get(), d_rows.get(), d_tokens.get(), nullptr, kRows, kVocab, nullptr);
  const auto batched = download(d_tokens.get(), kRows);
  sample_rows_fused(d_logits.get(), d_rows.get(), d_tokens.get(), nullptr, kRows, kVocab, nullptr);
  EXPECT_EQ(download(d_tokens.get(), kRows), batched);
  for (int64_t r : {0, 17, 63}) {
    sample_rows_fused(d_logits.get() + r * kVocab, d_rows.get() + r, d_tokens.get(), nullptr, 1,
                      kVocab, nullptr);
    EXPECT_EQ(download(d_tokens.get(), 1)[0], batched[r]) << "row " << r;
  }
}

TEST(Sampling, PenaltiesAndBadValuesAreRefused) {
  SamplingParams p;
  p.repetition_penalty = 1.2f;
  try {
    make_sample_row(p, 0, 0);
    FAIL() << "penalties accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("repetition_penalty"), std::string::npos);
  }
  SamplingParams q;
  q.top_p = 0.0f;
  EXPECT_THROW(make_sample_row(q, 0, 0), Error);
}

}  // namespace
}  // namespace optimate::cuda
