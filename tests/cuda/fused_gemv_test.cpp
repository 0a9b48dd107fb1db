// The small-m GEMV with its fused inputs and epilogues against a CPU twin that runs the
// unfused sequence (RMSNorm rounded to bf16, the product in double, the bf16 rounding of the
// stored projection, then RoPE / KV write / SiLU*mul / residual add), for every GemvKernel
// over every split of k, odd row counts, k off the 256-element grid, GQA ratios, padding slots
// and (the RMSNorm and SiLU / residual epilogues) FP8 weights.
#include <cmath>

#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_mma.h"
#include "model/fp8_quant.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;

float round_bf16(double v) { return bf16_to_f32(f32_to_bf16(static_cast<float>(v))); }

// ref[i, j] = sum_k x[i, k] * w[j, k] in double.
std::vector<double> ref_product(const std::vector<float>& x, const std::vector<float>& w, int64_t m,
                                int64_t n, int64_t k) {
  std::vector<double> y(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t kk = 0; kk < k; ++kk) acc += double(x[i * k + kk]) * w[j * k + kk];
      y[i * n + j] = acc;
    }
  return y;
}

// bf16(residual / rms * weight), as rmsnorm_residual writes it.
std::vector<float> ref_rmsnorm(const std::vector<float>& res, const std::vector<float>& weight,
                               int64_t m, int64_t k) {
  std::vector<float> out(m * k);
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < k; ++j) ss += double(res[i * k + j]) * res[i * k + j];
    const double inv = 1.0 / std::sqrt(ss / k + 1e-5);
    for (int64_t j = 0; j < k; ++j) out[i * k + j] = round_bf16(res[i * k + j] * inv * weight[j]);
  }
  return out;
}

// Every GEMV kernel with each of these splits of k (0: the kernel's own choice).
std::vector<std::pair<GemvKernel, int>> kernel_splits(std::initializer_list<int> splits) {
  std::vector<std::pair<GemvKernel, int>> out;
  for (GemvKernel kernel : {GemvKernel::kPairs, GemvKernel::kMma, GemvKernel::kMmaDeep})
    for (int split : splits) out.emplace_back(kernel, split);
  return out;
}

std::string variant(GemvKernel kernel, int split) {
  return std::string("kernel ") + gemv_kernel_name(kernel) + " split " + std::to_string(split);
}

std::vector<float> random_f32(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The tensor-core kernel's grid (host arithmetic, no GPU): every group of 8 pairs and part of k
// gets exactly one round, no SM holds more rounds than the planned share, and the Llama-3-8B
// projections on an H200's 132 SMs get the grids the design expects.
TEST(Gemv, MmaGridCoversEveryRoundAndEvensThemOverSms) {
  struct Case { int64_t n, k; bool fp8; int per_sm; int split, blocks; };
  for (const Case& cs : {Case{6144, 4096, false, 2, 8, 132}, Case{4096, 4096, true, 2, 8, 256},
                         Case{28672, 4096, false, 2, 8, 264}, Case{4096, 14336, false, 1, 8, 132},
                         Case{128256, 4096, true, 1, 4, 132}, Case{7, 8, false, 2, 1, 1}}) {
    const int64_t pairs = (cs.n + 1) / 2;
    const GemvMmaGrid g = gemv_mma_grid(pairs, cs.k, cs.fp8, 0, kGemvMmaUnroll, 132, cs.per_sm);
    EXPECT_EQ(g.split, cs.split) << cs.n << "x" << cs.k;
    EXPECT_EQ(g.blocks, cs.blocks) << cs.n << "x" << cs.k;
    EXPECT_EQ(g.rounds, ((pairs + 7) / 8 * g.split + 7) / 8) << cs.n << "x" << cs.k;
    EXPECT_LE(g.blocks, int64_t{132} * g.per_sm);
    for (int split : {1, 2, 4, 8})  // a forced split is kept
      EXPECT_EQ(gemv_mma_grid(pairs, cs.k, cs.fp8, split, kGemvMmaUnroll, 132, cs.per_sm).split, split);
  }
}

TEST(Gemv, PlainProductMatchesCpuTwinForEverySplit) {
  OPTIMATE_REQUIRE_GPU();
  struct Case { int64_t m, n, k; };
  for (const Case& cs : {Case{1, 4096, 4096}, Case{3, 1001, 1032}, Case{8, 130, 14336}, Case{5, 7, 8}}) {
    const Bf16Data x = random_bf16(cs.m * cs.k, 11);
    const Bf16Data w = random_bf16(cs.n * cs.k, 12, -0.05f, 0.05f);
    const Bf16Data bias = random_bf16(cs.n, 13);
    const std::vector<double> prod = ref_product(x.values, w.values, cs.m, cs.n, cs.k);
    std::vector<float> ref(cs.m * cs.n);
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < cs.n; ++j) ref[i * cs.n + j] = float(prod[i * cs.n + j] + bias.values[j]);
    auto d_x = upload(x.bits);
    auto d_w = upload(w.bits);
    auto d_b = upload(bias.bits);
    for (const auto& [kernel, split] : kernel_splits({0, 1, 2, 4, 8})) {
      DeviceBuffer<float> d_y(cs.m * cs.n);
      OPTIMATE_CUDA_CHECK(cudaMemset(d_y.get(), 0xff, d_y.bytes()));  // NaN poison
      GemvParams p;
      p.m = cs.m;
      p.n = cs.n;
      p.k = cs.k;
      p.x = bf16_ptr(d_x);
      p.w = bf16_ptr(d_w);
      p.bias = bf16_ptr(d_b);
      p.y = d_y.get();
      p.epilogue = GemvEpilogue::kStoreF32;
      p.kernel = kernel;
      p.split_k = split;
      gemv(p, nullptr);
      expect_close(download(d_y.get(), cs.m * cs.n), ref, 1e-3f, 1e-3f,
                   "gemv m " + std::to_string(cs.m) + " n " + std::to_string(cs.n) + " k " +
                       std::to_string(cs.k) + " " + variant(kernel, split));
    }
  }
}

TEST(Gemv, RmsNormInputWithResidualAndSiluEpilogues) {
  OPTIMATE_REQUIRE_GPU();
  for (int64_t m : {1, 4, 8})
    for (bool fp8 : {false, true}) {
      const int64_t k = 1024, inter = 384;
      const std::vector<float> res = random_f32(m * k, 21, -2.0f, 2.0f);
      const Bf16Data norm_w = random_bf16(k, 22, 0.5f, 1.5f);
      const Bf16Data w = random_bf16(2 * inter * k, 23, -0.05f, 0.05f);
      // FP8: e4m3 codes with row scales (model/fp8_quant.h), the product over their values.
      const Fp8Matrix q = quantize_fp8_matrix(w.values.data(), 2 * inter, k);
      std::vector<float> w_values = w.values;
      if (fp8)
        for (int64_t i = 0; i < 2 * inter * k; ++i) w_values[i] = fp8_decode(q.codes[i]) * q.scales[i / k];
      const std::vector<float> xn = ref_rmsnorm(res, norm_w.values, m, k);
      const std::vector<double> prod = ref_product(xn, w_values, m, 2 * inter, k);
      auto d_res = upload(res);
      auto d_nw = upload(norm_w.bits);
      auto d_w = upload(w.bits);
      auto d_codes = upload(q.codes);
      auto d_scales = upload(q.scales);
      for (const auto& [kernel, split] : kernel_splits({0, 1, 4})) {
        const std::string what = std::string(fp8 ? "fp8" : "bf16") + " m " + std::to_string(m) + " " +
                                 variant(kernel, split);
        // SiLU*mul: rows [0, inter) are the gate, [inter, 2 inter) the up projection.
        DeviceBuffer<uint16_t> d_act(m * inter);
        OPTIMATE_CUDA_CHECK(cudaMemset(d_act.get(), 0xff, d_act.bytes()));
        GemvParams p;
        p.input = GemvInput::kRmsNorm;
        p.residual_in = d_res.get();
        p.norm_weight = bf16_ptr(d_nw);
        p.m = m;
        p.n = 2 * inter;
        p.k = k;
        p.w = fp8 ? nullptr : bf16_ptr(d_w);
        p.w_fp8 = fp8 ? reinterpret_cast<const __nv_fp8_e4m3*>(d_codes.get()) : nullptr;
        p.w_scale = fp8 ? d_scales.get() : nullptr;
        p.epilogue = GemvEpilogue::kSiluMul;
        p.y = d_act.get();
        p.kernel = kernel;
        p.split_k = split;
        gemv(p, nullptr);
        std::vector<float> ref(m * inter);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < inter; ++j) {
            const double g = round_bf16(prod[i * 2 * inter + j]), u = round_bf16(prod[i * 2 * inter + inter + j]);
            ref[i * inter + j] = float(g / (1.0 + std::exp(-g)) * u);
          }
        expect_close(download_bf16(d_act.get(), m * inter), ref, 1e-2f, 1e-2f, "rmsnorm+silu " + what);

        // Residual add of the gate rows' product into a second residual stream.
        std::vector<float> out = random_f32(m * 2 * inter, 24, -1.0f, 1.0f);
        auto d_out = upload(out);
        p.epilogue = GemvEpilogue::kAddResidual;
        p.y = nullptr;
        p.residual_out = d_out.get();
        gemv(p, nullptr);
        for (int64_t i = 0; i < m * 2 * inter; ++i) out[i] += round_bf16(prod[i]);
        expect_close(download(d_out.get(), m * 2 * inter), out, 1e-2f, 1e-3f, "rmsnorm+residual " + what);
      }
    }
}

TEST(Gemv, RopeAndKvCacheEpilogueMatchesUnfusedSequence) {
  OPTIMATE_REQUIRE_GPU();
  struct Case { int64_t heads, kv_heads, head_dim; };
  for (const Case& cs : {Case{4, 2, 128}, Case{6, 1, 64}, Case{8, 8, 64}}) {
    const int64_t m = 5, k = 512, D = cs.head_dim, bs = 16, blocks = 8;
    const int64_t q_dim = cs.heads * D, kv_dim = cs.kv_heads * D, n = q_dim + 2 * kv_dim;
    const std::vector<int32_t> pos = {0, 1, 17, 4095, 131071};
    const std::vector<int32_t> slots = {0, 17, -1, 127, 64};  // -1: a padding row
    std::vector<float> inv_freq(D / 2);
    for (int64_t i = 0; i < D / 2; ++i) inv_freq[i] = float(std::pow(500000.0, -2.0 * i / D));
    const Bf16Data x = random_bf16(m * k, 31);
    const Bf16Data w = random_bf16(n * k, 32, -0.1f, 0.1f);
    const Bf16Data bias = random_bf16(n, 33);
    std::vector<double> prod = ref_product(x.values, w.values, m, n, k);
    std::vector<float> ref(m * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) ref[i * n + j] = round_bf16(prod[i * n + j] + bias.values[j]);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t h = 0; h < cs.heads + cs.kv_heads; ++h)
        for (int64_t d = 0; d < D / 2; ++d) {
          float* row = ref.data() + i * n + h * D;
          const double a = double(float(pos[i]) * inv_freq[d]);
          const double x0 = row[d], x1 = row[d + D / 2];
          row[d] = float(x0 * std::cos(a) - x1 * std::sin(a));
          row[d + D / 2] = float(x1 * std::cos(a) + x0 * std::sin(a));
        }
    const size_t cache_elems = blocks * cs.kv_heads * bs * D;
    std::vector<float> ref_k(cache_elems, bf16_to_f32(kPoisonBf16)), ref_v = ref_k;
    for (int64_t i = 0; i < m; ++i) {
      if (slots[i] < 0) continue;
      for (int64_t e = 0; e < kv_dim; ++e) {
        const int64_t dst = ((slots[i] / bs * cs.kv_heads + e / D) * bs + slots[i] % bs) * D + e % D;
        ref_k[dst] = ref[i * n + q_dim + e];
        ref_v[dst] = ref[i * n + q_dim + kv_dim + e];
      }
    }
    auto d_x = upload(x.bits);
    auto d_w = upload(w.bits);
    auto d_b = upload(bias.bits);
    auto d_pos = upload(pos);
    auto d_slots = upload(slots);
    auto d_freq = upload(inv_freq);
    for (const auto& [kernel, split] : kernel_splits({0, 1, 2, 8})) {
      DeviceBuffer<uint16_t> d_y(m * n), d_k(cache_elems), d_v(cache_elems);
      for (auto* b : {&d_y, &d_k, &d_v}) {
        std::vector<uint16_t> poison(b->size(), kPoisonBf16);
        OPTIMATE_CUDA_CHECK(cudaMemcpy(b->get(), poison.data(), b->bytes(), cudaMemcpyHostToDevice));
      }
      GemvParams p;
      p.m = m;
      p.n = n;
      p.k = k;
      p.x = bf16_ptr(d_x);
      p.w = bf16_ptr(d_w);
      p.bias = bf16_ptr(d_b);
      p.y = d_y.get();
      p.epilogue = GemvEpilogue::kRopeKvWrite;
      p.positions = d_pos.get();
      p.inv_freq = d_freq.get();
      p.slot_mapping = d_slots.get();
      p.kv_cache = bf16_arena(d_k, d_v, cs.kv_heads, bs, D);
      p.num_heads = cs.heads;
      p.num_kv_heads = cs.kv_heads;
      p.head_dim = D;
      p.block_size = bs;
      p.kernel = kernel;
      p.split_k = split;
      gemv(p, nullptr);
      const std::string what = "rope/kv heads " + std::to_string(cs.heads) + "/" +
                               std::to_string(cs.kv_heads) + " D " + std::to_string(D) +
                               " " + variant(kernel, split);
      expect_close(download_bf16(d_y.get(), m * n), ref, 2e-2f, 1e-2f, what + " qkv");
      expect_close(download_bf16(d_k.get(), cache_elems), ref_k, 2e-2f, 1e-2f, what + " k cache");
      expect_close(download_bf16(d_v.get(), cache_elems), ref_v, 2e-2f, 1e-2f, what + " v cache");
    }
  }
}

}  // namespace
}  // namespace optimate::cuda
