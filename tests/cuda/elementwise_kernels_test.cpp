// RMSNorm+residual, RoPE, SiLU*mul, embedding gather and argmax against their CPU twins.
#include <cmath>
#include <numeric>

#include "backend/cuda/activation.h"
#include "backend/cuda/argmax.h"
#include "backend/cuda/embedding.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "model/model_config.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;

TEST(RmsNormResidual, MatchesCpuTwinWithAndWithoutAddAndRowSelection) {
  OPTIMATE_REQUIRE_GPU();
  for (int64_t hidden : {576, 4096, 1000}) {
    const int64_t rows = 7;
    const Bf16Data x = random_bf16(rows * hidden, 1);
    const Bf16Data w = random_bf16(hidden, 2, 0.5f, 1.5f);
    std::vector<float> res(rows * hidden);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    for (float& v : res) v = dist(rng);
    for (bool add : {false, true}) {
      for (bool select : {false, true}) {
        const std::vector<int32_t> ids = select ? std::vector<int32_t>{6, 0, 3} : std::vector<int32_t>{};
        const int64_t out_rows = select ? 3 : rows;
        auto d_x = upload(x.bits);
        auto d_w = upload(w.bits);
        auto d_res = upload(res);
        auto d_ids = upload(ids);
        DeviceBuffer<uint16_t> d_out(out_rows * hidden);
        OPTIMATE_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, d_out.bytes()));
        rmsnorm_residual(add ? bf16_ptr(d_x) : nullptr, d_res.get(), bf16_ptr(d_w), bf16_ptr(d_out),
                         select ? d_ids.get() : nullptr, out_rows, hidden, 1e-5f, nullptr);
        std::vector<float> ref_out(out_rows * hidden), ref_res = res;
        for (int64_t r = 0; r < out_rows; ++r) {
          const int64_t s = select ? ids[r] : r;
          double ss = 0;
          for (int64_t i = 0; i < hidden; ++i) {
            if (add) ref_res[s * hidden + i] += x.values[s * hidden + i];
            ss += double(ref_res[s * hidden + i]) * ref_res[s * hidden + i];
          }
          const double inv = 1.0 / std::sqrt(ss / hidden + 1e-5);
          for (int64_t i = 0; i < hidden; ++i)
            ref_out[r * hidden + i] = float(ref_res[s * hidden + i] * inv * w.values[i]);
        }
        const std::string what = "rmsnorm hidden " + std::to_string(hidden) + (add ? " add" : "") +
                                 (select ? " rows" : "");
        expect_close(download_bf16(d_out.get(), out_rows * hidden), ref_out, 1e-2f, 1e-2f, what);
        // Rows not selected keep their residual untouched; selected ones hold the sum.
        expect_close(download(d_res.get(), rows * hidden),
                     select ? [&] {
                       std::vector<float> e = res;
                       for (int32_t s : ids)
                         for (int64_t i = 0; i < hidden; ++i) e[s * hidden + i] = ref_res[s * hidden + i];
                       return e;
                     }()
                            : ref_res,
                     1e-5f, 1e-6f, what + " residual");
      }
    }
  }
}

TEST(Rope, MatchesCpuTwinWithLlama3Scaling) {
  OPTIMATE_REQUIRE_GPU();
  ModelConfig c;
  c.head_dim = 128;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.hidden_size = 512;
  c.rope_theta = 500000.0f;
  c.rope_scaling.type = RopeScalingType::kLlama3;
  c.rope_scaling.factor = 8.0f;
  c.rope_scaling.low_freq_factor = 1.0f;
  c.rope_scaling.high_freq_factor = 4.0f;
  c.rope_scaling.original_max_position_embeddings = 8192;
  const std::vector<float> inv_freq = rope_inv_freq(c);
  const int64_t D = c.head_dim, T = 5, stride = (c.num_heads + 2 * c.num_kv_heads) * D;
  const std::vector<int32_t> pos = {0, 1, 17, 4095, 131071};
  const Bf16Data qkv = random_bf16(T * stride, 4);
  auto d_qkv = upload(qkv.bits);
  auto d_pos = upload(pos);
  auto d_freq = upload(inv_freq);
  rope_inplace(bf16_ptr(d_qkv), stride, d_pos.get(), d_freq.get(), T, c.num_heads, c.num_kv_heads, D, nullptr);
  std::vector<float> ref = qkv.values;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < c.num_heads + c.num_kv_heads; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double a = double(float(pos[t]) * inv_freq[i]);
        float* x = ref.data() + t * stride + h * D;
        const double x0 = qkv.values[t * stride + h * D + i], x1 = qkv.values[t * stride + h * D + i + D / 2];
        x[i] = float(x0 * std::cos(a) - x1 * std::sin(a));
        x[i + D / 2] = float(x1 * std::cos(a) + x0 * std::sin(a));
      }
  // v columns stay untouched, exactly.
  expect_close(download_bf16(d_qkv.get(), T * stride), ref, 1e-2f, 1e-2f, "rope");
}

TEST(SiluMul, MatchesCpuTwinVectorAndScalarPaths) {
  OPTIMATE_REQUIRE_GPU();
  for (int64_t inter : {14336, 1001}) {
    const int64_t T = 3;
    const Bf16Data gu = random_bf16(T * 2 * inter, 5, -6.0f, 6.0f);
    auto d_gu = upload(gu.bits);
    DeviceBuffer<uint16_t> d_out(T * inter);
    silu_mul(bf16_ptr(d_gu), bf16_ptr(d_out), T, inter, nullptr);
    std::vector<float> ref(T * inter);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < inter; ++i) {
        const double g = gu.values[t * 2 * inter + i], u = gu.values[t * 2 * inter + inter + i];
        ref[t * inter + i] = float(g / (1.0 + std::exp(-g)) * u);
      }
    expect_close(download_bf16(d_out.get(), T * inter), ref, 1e-2f, 1e-2f,
                 "silu_mul intermediate " + std::to_string(inter));
  }
}

TEST(Embedding, GathersRowsIntoFp32Residual) {
  OPTIMATE_REQUIRE_GPU();
  const int64_t vocab = 1000, hidden = 576;
  const Bf16Data table = random_bf16(vocab * hidden, 6);
  const std::vector<int32_t> ids = {0, 999, 5, 5, 123};
  auto d_table = upload(table.bits);
  auto d_ids = upload(ids);
  DeviceBuffer<float> d_out(ids.size() * hidden);
  embedding_gather(bf16_ptr(d_table), d_ids.get(), d_out.get(), ids.size(), hidden, 0, vocab, nullptr);
  std::vector<float> ref;
  for (int32_t id : ids) ref.insert(ref.end(), table.values.begin() + id * hidden, table.values.begin() + (id + 1) * hidden);
  expect_close(download(d_out.get(), ids.size() * hidden), ref, 0.0f, 0.0f, "embedding");
}

TEST(Embedding, RankOfASplitVocabularyGivesZerosForOtherTokens) {
  OPTIMATE_REQUIRE_GPU();
  // The rank holding tokens [400, 700) of a 1000-token vocabulary: table rows 0..299.
  const int64_t hidden = 64, begin = 400, rows = 300;
  const Bf16Data table = random_bf16(rows * hidden, 8);
  const std::vector<int32_t> ids = {0, 399, 400, 699, 700, 999, 512};
  auto d_table = upload(table.bits);
  auto d_ids = upload(ids);
  DeviceBuffer<float> d_out(ids.size() * hidden);
  embedding_gather(bf16_ptr(d_table), d_ids.get(), d_out.get(), ids.size(), hidden, begin, rows, nullptr);
  std::vector<float> ref;
  for (int32_t id : ids) {
    if (id < begin || id >= begin + rows) ref.insert(ref.end(), hidden, 0.0f);
    else ref.insert(ref.end(), table.values.begin() + (id - begin) * hidden, table.values.begin() + (id - begin + 1) * hidden);
  }
  expect_close(download(d_out.get(), ids.size() * hidden), ref, 0.0f, 0.0f, "embedding of a vocabulary split");
}

TEST(Argmax, PicksLowestIndexOfTheMaximumPerRow) {
  OPTIMATE_REQUIRE_GPU();
  const int64_t vocab = 128256, rows = 4;
  std::vector<float> logits(rows * vocab);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (float& v : logits) v = dist(rng);
  logits[0 * vocab + 77777] = 100.0f;
  logits[1 * vocab + 5] = 50.0f;  // a tie: the lower index wins
  logits[1 * vocab + 60000] = 50.0f;
  logits[2 * vocab + vocab - 1] = 60.0f;
  for (int64_t i = 0; i < vocab; ++i) logits[3 * vocab + i] = -1.0f;  // all equal: index 0
  auto d_logits = upload(logits);
  DeviceBuffer<int32_t> d_ids(rows);
  argmax_rows(d_logits.get(), d_ids.get(), rows, vocab, nullptr);
  EXPECT_EQ(download(d_ids.get(), rows), (std::vector<int32_t>{77777, 5, int32_t(vocab - 1), 0}));
}

}  // namespace
}  // namespace optimate::cuda
