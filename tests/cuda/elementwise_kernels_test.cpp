// RMSNorm+residual, RoPE, SiLU*mul, embedding gather and argmax against their CPU twins, both
// generations of the GEMM path's kernels (elementwise_kernels.h) alike; the FP8 outputs of
// RMSNorm and SiLU*mul bit for bit against the host's FP8 rounding (model/fp8_quant.h) of the
// bf16 rows the same kernels write.
#include <cmath>
#include <numeric>

#include "backend/cuda/activation.h"
#include "backend/cuda/argmax.h"
#include "backend/cuda/embedding.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "core/error.h"
#include "model/fp8_quant.h"
#include "model/model_config.h"
#include "small_models.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;

constexpr ElementwiseKernels kBothKernels[] = {ElementwiseKernels::kCurrent, ElementwiseKernels::kBaseline};

const char* kernels_name(ElementwiseKernels k) { return k == ElementwiseKernels::kCurrent ? "current" : "baseline"; }

// codes/scales as the FP8 row kernels wrote them against quantize_fp8_matrix over `bf16_rows`
// (the same kernel's bf16 output), exactly.
void expect_fp8_rows_equal(const DeviceBuffer<uint8_t>& codes, const DeviceBuffer<float>& scales,
                           const std::vector<float>& bf16_rows, int64_t rows, int64_t cols, const std::string& what) {
  const Fp8Matrix ref = quantize_fp8_matrix(bf16_rows.data(), rows, cols);
  EXPECT_EQ(download(scales.get(), rows), ref.scales) << what << " scales";
  const std::vector<uint8_t> got = download(codes.get(), rows * cols);
  int64_t bad = 0;
  for (int64_t i = 0; i < rows * cols; ++i)
    if (got[i] != ref.codes[i] && bad++ < 8)
      ADD_FAILURE() << what << ": row " << i / cols << " col " << i % cols << " code " << int(got[i]) << ", host "
                    << int(ref.codes[i]) << " (bf16 value " << bf16_rows[i] << ")";
  EXPECT_EQ(bad, 0) << what;
}

TEST(RmsNormResidual, MatchesCpuTwinWithAndWithoutAddAndRowSelection) {
  OPTIMATE_REQUIRE_GPU();
  // 4096 and 576: one 16-byte group per thread; 12288: four; 1004 and 20000: the row kernel
  // does not take them (not a multiple of 8, too wide), so both generations run the baseline.
  for (ElementwiseKernels kernels : kBothKernels)
  for (int64_t hidden : {576, 4096, 1000, 12288, 1004, 20000}) {
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
                         select ? d_ids.get() : nullptr, out_rows, hidden, 1e-5f, nullptr, kernels);
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
        const std::string what = std::string("rmsnorm (") + kernels_name(kernels) + ") hidden " +
                                 std::to_string(hidden) + (add ? " add" : "") + (select ? " rows" : "");
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

// The FP8 output is the bf16 output rounded on the host's terms: same residual, and codes and
// scales equal to quantize_fp8_matrix over the bf16 rows rmsnorm_residual writes. Row 1 is all
// zeros (scale 0), row 2 huge, row 3 tiny (eps dominates its mean square).
TEST(RmsNormResidual, Fp8OutputIsTheBf16OutputRoundedByTheHostTwin) {
  OPTIMATE_REQUIRE_GPU();
  for (int64_t hidden : {4096, 576, 8200, 12288}) {
    const int64_t rows = 6;
    const Bf16Data x = random_bf16(rows * hidden, 21, -3.0f, 3.0f);
    const Bf16Data w = random_bf16(hidden, 22, 0.2f, 1.8f);
    std::vector<float> res(rows * hidden);
    std::mt19937 rng(23);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    for (int64_t i = 0; i < rows * hidden; ++i) {
      const int64_t r = i / hidden;
      res[i] = r == 1 ? 0.0f : r == 2 ? dist(rng) * 1e4f : r == 3 ? dist(rng) * 1e-6f : dist(rng);
    }
    std::vector<uint16_t> x_bits = x.bits;
    for (int64_t j = 0; j < hidden; ++j) x_bits[hidden + j] = f32_to_bf16(0.0f);
    for (bool add : {false, true}) {
      auto d_x = upload(x_bits);
      auto d_w = upload(w.bits);
      auto d_res_bf16 = upload(res), d_res_fp8 = upload(res);
      DeviceBuffer<uint16_t> d_out(rows * hidden);
      DeviceBuffer<uint8_t> d_codes(rows * hidden);
      DeviceBuffer<float> d_scales(rows);
      OPTIMATE_CUDA_CHECK(cudaMemset(d_codes.get(), 0xff, d_codes.bytes()));
      rmsnorm_residual(add ? bf16_ptr(d_x) : nullptr, d_res_bf16.get(), bf16_ptr(d_w), bf16_ptr(d_out), nullptr, rows,
                       hidden, 1e-5f, nullptr);
      rmsnorm_residual_fp8(add ? bf16_ptr(d_x) : nullptr, d_res_fp8.get(), bf16_ptr(d_w),
                           {reinterpret_cast<__nv_fp8_e4m3*>(d_codes.get()), d_scales.get()}, rows, hidden, 1e-5f,
                           nullptr);
      const std::string what = "fp8 rmsnorm hidden " + std::to_string(hidden) + (add ? " add" : "");
      EXPECT_EQ(download(d_res_fp8.get(), rows * hidden), download(d_res_bf16.get(), rows * hidden))
          << what << " residual";
      expect_fp8_rows_equal(d_codes, d_scales, download_bf16(d_out.get(), rows * hidden), rows, hidden, what);
    }
  }
}

TEST(Rope, MatchesCpuTwinWithLlama3Scaling) {
  OPTIMATE_REQUIRE_GPU();
  ModelConfig c = llama3_rope_config(128);
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.hidden_size = 512;
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
  for (ElementwiseKernels kernels : kBothKernels)
  for (int64_t inter : {14336, 1001, 688}) {
    const int64_t T = 3;
    const Bf16Data gu = random_bf16(T * 2 * inter, 5, -6.0f, 6.0f);
    auto d_gu = upload(gu.bits);
    DeviceBuffer<uint16_t> d_out(T * inter);
    silu_mul(bf16_ptr(d_gu), bf16_ptr(d_out), T, inter, nullptr, kernels);
    std::vector<float> ref(T * inter);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < inter; ++i) {
        const double g = gu.values[t * 2 * inter + i], u = gu.values[t * 2 * inter + inter + i];
        ref[t * inter + i] = float(g / (1.0 + std::exp(-g)) * u);
      }
    expect_close(download_bf16(d_out.get(), T * inter), ref, 1e-2f, 1e-2f,
                 std::string("silu_mul (") + kernels_name(kernels) + ") intermediate " + std::to_string(inter));
  }
}

// As for RMSNorm: the FP8 output is quantize_fp8_matrix over silu_mul's bf16 rows, exactly. Row
// 1 all zeros, row 2 large (outputs near e4m3's saturation after scaling), row 3 tiny.
TEST(SiluMul, Fp8OutputIsTheBf16OutputRoundedByTheHostTwin) {
  OPTIMATE_REQUIRE_GPU();
  for (int64_t inter : {14336, 688, 1000, 40000}) {
    const int64_t T = 5;
    Bf16Data gu = random_bf16(T * 2 * inter, 25, -8.0f, 8.0f);
    for (int64_t j = 0; j < 2 * inter; ++j) {
      gu.bits[2 * inter + j] = f32_to_bf16(0.0f);
      gu.bits[2 * 2 * inter + j] = f32_to_bf16(gu.values[2 * 2 * inter + j] * 300.0f);
      gu.bits[3 * 2 * inter + j] = f32_to_bf16(gu.values[3 * 2 * inter + j] * 1e-5f);
    }
    auto d_gu = upload(gu.bits);
    DeviceBuffer<uint16_t> d_out(T * inter);
    DeviceBuffer<uint8_t> d_codes(T * inter);
    DeviceBuffer<float> d_scales(T);
    OPTIMATE_CUDA_CHECK(cudaMemset(d_codes.get(), 0xff, d_codes.bytes()));
    silu_mul(bf16_ptr(d_gu), bf16_ptr(d_out), T, inter, nullptr);
    silu_mul_fp8(bf16_ptr(d_gu), {reinterpret_cast<__nv_fp8_e4m3*>(d_codes.get()), d_scales.get()}, T, inter, nullptr);
    expect_fp8_rows_equal(d_codes, d_scales, download_bf16(d_out.get(), T * inter), T, inter,
                          "fp8 silu_mul intermediate " + std::to_string(inter));
  }
}

TEST(ElementwiseFp8, WidthsTheRowKernelsDoNotTakeAreErrors) {
  OPTIMATE_REQUIRE_GPU();
  EXPECT_FALSE(rmsnorm_fp8_fits(1004));
  EXPECT_FALSE(rmsnorm_fp8_fits(20000));
  EXPECT_FALSE(silu_mul_fp8_fits(1001));
  DeviceBuffer<float> res(1004);
  DeviceBuffer<uint16_t> w(1004);
  DeviceBuffer<uint8_t> codes(1004);
  DeviceBuffer<float> scales(1);
  const Fp8Activations out{reinterpret_cast<__nv_fp8_e4m3*>(codes.get()), scales.get()};
  EXPECT_THROW(rmsnorm_residual_fp8(nullptr, res.get(), bf16_ptr(w), out, 1, 1004, 1e-5f, nullptr), Error);
  EXPECT_THROW(silu_mul_fp8(bf16_ptr(w), out, 1, 501, nullptr), Error);
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
