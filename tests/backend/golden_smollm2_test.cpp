// SmolLM2-135M-Instruct (Q4_1 GGUF) on the CPU runner against Hugging Face transformers on the
// same file (tests/data/golden/smollm2_golden.json, from tests/scripts/make_golden_fixtures.py):
// the fp32-activation reference path to fp32 rounding (top-1 at every prompt position, logits
// within 1e-3, identical greedy continuations), and the 8-bit-activation path within the error
// its quantization allows (GoldenSmolLM2Q8 below).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_model_runner.h"
#include "model/weights.h"

namespace optimate::cpu {
namespace {

// Reference path. Both sides compute in fp32 with the same weight values (ours read from the
// Q4_1/Q8_0 blocks as stored, transformers from its dequantized copy); only the summation order
// differs (OpenBLAS blocking vs PyTorch's kernels, our attention loop vs SDPA). One fp32 dot
// product of length 1536 carries a relative error near 1e-6; through 30 residual layers the
// logits (magnitude ~10-30) move by <= 1e-4 in practice. 1e-3 leaves more than 10x room, stays
// below half the smallest top-1/top-2 gap of the greedy continuations (0.0038), and still
// catches any real error (a wrong rotary, norm or mask moves logits by whole units).
constexpr float kLogitTolerance = 1e-3f;

// 8-bit activations. Every matrix product rounds its input to 255 levels per group of 4
// (q8_activations.h): an error up to half a step of the group's largest value per element, which
// 30 layers carry into the logits. Measured on these fixtures (AVX-512 VNNI; AVX2 alike: same
// quantized values, other summation order): largest error on a top-20 logit 0.61 at one
// position (0.23 over the whole prompts and chunks), mean 0.075; with groups of 32 (llama.cpp's
// activation blocks) the largest was 2.0. The bound is 1.0 (mean 0.15): room for other thread
// counts and kernels, while the error of one projection type's 8-bit rounding alone is 0.2-0.7
// in the largest logit, so a kernel that got a scale or offset wrong in any matrix type would
// exceed it. Whenever transformers' best token leads its second by more than 2 * 1.0, no error
// within the bound can change the argmax: top-1 must agree there, and a greedy continuation must
// follow the reference until its first step with a smaller lead (after which either token is a
// faithful continuation of a near-tie).
constexpr float kQ8LogitBound = 1.0f;
constexpr float kQ8MeanBound = 0.15f;

const std::string kModel = std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

struct Stats {
  float worst = 0.0f;
  double sum = 0.0;
  int64_t count = 0;
  int64_t positions = 0;
  int64_t top1_agree = 0;
};

// Loads the model and fixture once per suite; one runner per activation path.
class GoldenBase : public ::testing::Test {
 protected:
  static void load() {
    if (fixture_ || !std::filesystem::exists(kModel)) return;
    std::ifstream f(std::string(OPTIMATE_TEST_DATA_DIR) + "/golden/smollm2_golden.json");
    fixture_ = new nlohmann::json(nlohmann::json::parse(f));
    model_ = new LoadedModel(load_model(kModel));
  }
  // One thread: these tests are about numerics; cpu_runner_batch_test covers threading.
  static std::unique_ptr<CpuModelRunner> make_runner(CpuActivations a, std::optional<CpuIsa> isa = {}) {
    return std::make_unique<CpuModelRunner>(
        model_->config, model_->weights,
        CpuRunnerOptions{.num_kv_blocks = 16, .block_size = 16, .num_threads = 1, .activations = a, .isa = isa});
  }

  static std::vector<float> step(CpuModelRunner& runner, std::span<const int32_t> tokens, int64_t start_pos) {
    std::vector<float> logits;
    runner.forward({.seqs = {{.token_ids = tokens, .start_pos = start_pos, .block_table = kBlocks}}}, logits);
    return logits;
  }

  static int32_t argmax(const std::vector<float>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
  }

  // Compares one position's logits with the fixture's top-20 and maximum; returns the largest
  // |difference| and adds every difference to `stats`.
  static float diff_position(const std::vector<float>& logits, const nlohmann::json& want, Stats& stats) {
    const auto ids = want["top_ids"].get<std::vector<int32_t>>();
    const auto values = want["top_logits"].get<std::vector<float>>();
    const int32_t top1 = argmax(logits);
    float worst = std::fabs(logits[top1] - want["max_logit"].get<float>());
    for (size_t i = 0; i < ids.size(); ++i) {
      const float d = std::fabs(logits[ids[i]] - values[i]);
      worst = std::max(worst, d);
      stats.sum += d;
      ++stats.count;
    }
    stats.worst = std::max(stats.worst, worst);
    ++stats.positions;
    if (top1 == ids[0]) ++stats.top1_agree;
    return worst;
  }

  // Every prompt position token by token (single rows), the whole prompt and uneven chunks (the
  // multi-row paths): check(logits, fixture position, label) for each.
  template <typename Check>
  static void for_each_position(CpuModelRunner& runner, bool token_by_token, const Check& check) {
    for (const auto& c : (*fixture_)["cases"]) {
      const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
      const std::string name = c["name"];
      if (token_by_token)
        for (size_t p = 0; p < prompt.size(); ++p)
          check(step(runner, std::span(prompt).subspan(p, 1), static_cast<int64_t>(p)), c["positions"][p],
                name + " position " + std::to_string(p));
      check(step(runner, prompt, 0), c["positions"][prompt.size() - 1], name + " whole prompt");
      for (size_t start = 0, n = 3; start < prompt.size(); start += n, n += 2) {
        const size_t len = std::min(n, prompt.size() - start);
        check(step(runner, std::span(prompt).subspan(start, len), static_cast<int64_t>(start)),
              c["positions"][start + len - 1], name + " chunk ending at " + std::to_string(start + len - 1));
      }
    }
  }

  // Greedy decoding from each prompt; returns (ours, reference, reference margins) per case.
  template <typename Check>
  static void for_each_continuation(CpuModelRunner& runner, const Check& check) {
    for (const auto& c : (*fixture_)["cases"]) {
      auto tokens = c["prompt_ids"].get<std::vector<int32_t>>();
      const auto want = c["greedy_ids"].get<std::vector<int32_t>>();
      std::vector<float> logits = step(runner, tokens, 0);
      std::vector<int32_t> got;
      for (size_t i = 0; i < want.size(); ++i) {
        const int32_t next = argmax(logits);
        got.push_back(next);
        tokens.push_back(next);
        logits = step(runner, std::span(tokens).last(1), static_cast<int64_t>(tokens.size() - 1));
      }
      check(got, want, c["greedy_margins"].get<std::vector<float>>(),
            c["name"].get<std::string>() + ": " + c["greedy_text"].get<std::string>());
    }
  }

  static inline nlohmann::json* fixture_ = nullptr;
  static inline LoadedModel* model_ = nullptr;
  static inline const std::vector<int32_t> kBlocks = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
};

// A suite's runner, on one activation path; made once, kept to the end of the program.
template <CpuActivations kPath>
class GoldenOnPath : public GoldenBase {
 protected:
  void SetUp() override {
    load();
    if (!model_) GTEST_SKIP() << kModel << " not present";
    static CpuModelRunner* runner = make_runner(kPath).release();
    runner_ = runner;
  }
  CpuModelRunner* runner_ = nullptr;
};

class GoldenSmolLM2 : public GoldenOnPath<CpuActivations::kF32> {};

TEST_F(GoldenSmolLM2, EveryPromptPositionMatchesTransformers) {
  Stats stats;
  for_each_position(*runner_, true, [&](const std::vector<float>& logits, const nlohmann::json& want, const std::string& where) {
    const int32_t top1 = argmax(logits);
    const auto ids = want["top_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(top1, ids[0]) << where << ": top-1 differs";
    EXPECT_LE(diff_position(logits, want, stats), kLogitTolerance) << where;
  });
  RecordProperty("max_abs_logit_diff", std::to_string(stats.worst));
  std::printf("max |logit - reference| = %g\n", stats.worst);
}

TEST_F(GoldenSmolLM2, GreedyContinuationsMatchTransformers) {
  for_each_continuation(*runner_, [](const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                                     const std::vector<float>&, const std::string& what) { EXPECT_EQ(got, want) << what; });
}

class GoldenSmolLM2Q8 : public GoldenOnPath<CpuActivations::kQ8> {
 protected:
  void check_positions(CpuModelRunner& runner, bool token_by_token, const std::string& label) {
    Stats stats;
    int64_t decided = 0;
    for_each_position(runner, token_by_token, [&](const std::vector<float>& logits, const nlohmann::json& want, const std::string& where) {
      const auto values = want["top_logits"].get<std::vector<float>>();
      EXPECT_LE(diff_position(logits, want, stats), kQ8LogitBound) << label << " " << where;
      if (values[0] - values[1] > 2 * kQ8LogitBound) {
        ++decided;
        EXPECT_EQ(argmax(logits), want["top_ids"][0].get<int32_t>()) << label << " " << where << ": top-1 differs";
      }
    });
    const double mean = stats.sum / static_cast<double>(stats.count);
    EXPECT_LE(mean, kQ8MeanBound) << label;
    std::printf("%s: max |logit - reference| = %.4f, mean %.4f; top-1 agrees at %lld of %lld positions "
                "(%lld with a lead over %.1f, where it must)\n",
                label.c_str(), stats.worst, mean, static_cast<long long>(stats.top1_agree),
                static_cast<long long>(stats.positions), static_cast<long long>(decided), 2 * kQ8LogitBound);
  }
};

TEST_F(GoldenSmolLM2Q8, EveryPromptPositionStaysWithinTheQuantizationBound) {
  check_positions(*runner_, true, std::string(cpu_isa_name(runner_->isa())));
}

TEST_F(GoldenSmolLM2Q8, EveryKernelVariantStaysWithinTheBound) {
  for (CpuIsa isa : supported_cpu_isas()) {
    auto runner = make_runner(CpuActivations::kQ8, isa);
    check_positions(*runner, false, std::string(cpu_isa_name(isa)) + " (prompts and chunks)");
  }
}

TEST_F(GoldenSmolLM2Q8, GreedyContinuationsFollowTransformersUntilANearTie) {
  int64_t same = 0, total = 0;
  for_each_continuation(*runner_, [&](const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                                      const std::vector<float>& margins, const std::string& what) {
    size_t must = 0;
    while (must < want.size() && margins[must] > 2 * kQ8LogitBound) ++must;
    size_t agree = 0;
    while (agree < want.size() && got[agree] == want[agree]) ++agree;
    EXPECT_GE(agree, must) << what << ": differs at step " << agree << " before the first near-tie (step " << must << ")";
    same += static_cast<int64_t>(agree);
    total += static_cast<int64_t>(want.size());
    std::printf("%.40s...: first %zu of %zu tokens equal (first lead under %.1f at step %zu)\n", what.c_str(), agree,
                want.size(), 2 * kQ8LogitBound, must);
  });
  std::printf("greedy: %lld of %lld tokens before the first difference\n", static_cast<long long>(same),
              static_cast<long long>(total));
}

}  // namespace
}  // namespace optimate::cpu
