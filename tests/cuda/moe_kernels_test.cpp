// The mixture-of-experts kernels against their CPU twins: moe_route against route_tokens
// (model/moe_routing.h: the same experts, ties to the lower index), moe_align against
// group_by_expert (the same pairs per expert, tiles covering each run), the grouped GEMMs
// against fp32 sums of the same bf16 (or e4m3) values, moe_combine against the weighted sum, and
// qk_norm against Qwen3's per-head RMSNorm; for routings with ties, experts without tokens, all
// tokens on the same experts, and steps of 1 to 512 tokens.
//
// Tolerances: the GEMM twins sum the same exact products in fp32 in another order (about 1e-6
// relative), then the kernel rounds to bf16 (2^-9 relative): 1e-2 relative plus a little
// absolute for values near zero. The gate/up twin rounds gate and up to bf16 before the SiLU as
// the kernel does.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "backend/cuda/moe_gemm.h"
#include "backend/cuda/moe_routing.h"
#include "backend/cuda/qk_norm.h"
#include "core/error.h"
#include "core/half.h"
#include "model/fp8_quant.h"
#include "model/moe_routing.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;

enum class Logits { kRandom, kZero, kOneWins, kTiedPairs };

// [tokens, experts] router logits of each kind: random; all zero (every expert ties: experts
// 0..k-1 take every token); expert e_star far above the rest for every token; values in tied
// pairs (2i and 2i + 1 equal).
std::vector<float> make_logits(Logits kind, int64_t tokens, int64_t experts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> l(static_cast<size_t>(tokens * experts));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < experts; ++e) {
      float& v = l[t * experts + e];
      switch (kind) {
        case Logits::kRandom: v = normal(rng); break;
        case Logits::kZero: v = 0.0f; break;
        case Logits::kOneWins: v = e == experts / 2 ? 30.0f : normal(rng); break;
        case Logits::kTiedPairs: v = e % 2 == 0 ? normal(rng) : l[t * experts + e - 1]; break;
      }
    }
  return l;
}

struct RouteCase {
  int64_t tokens, experts, top_k;
  Logits kind;
};

class MoeRouteAlign : public ::testing::TestWithParam<RouteCase> {};

const char* logits_name(Logits kind) {
  const char* names[] = {"random", "zero", "one_wins", "tied_pairs"};
  return names[static_cast<int>(kind)];
}

std::string route_case_name(const ::testing::TestParamInfo<RouteCase>& info) {
  return std::to_string(info.param.tokens) + "x" + std::to_string(info.param.experts) + "_top" +
         std::to_string(info.param.top_k) + "_" + logits_name(info.param.kind);
}

TEST_P(MoeRouteAlign, MatchesTheCpuTwins) {
  OPTIMATE_REQUIRE_GPU();
  const RouteCase& c = GetParam();
  const std::vector<float> logits = make_logits(c.kind, c.tokens, c.experts, 7);
  const int64_t pairs_n = c.tokens * c.top_k;
  for (bool renormalize : {false, true}) {
    std::vector<int32_t> ids(pairs_n);
    std::vector<float> weights(pairs_n);
    route_tokens(logits.data(), c.tokens, c.experts, c.top_k, renormalize, ids.data(), weights.data());
    DeviceBuffer<float> d_logits = upload(logits);
    DeviceBuffer<int32_t> d_ids(pairs_n);
    DeviceBuffer<float> d_weights(pairs_n);
    moe_route(d_logits.get(), d_ids.get(), d_weights.get(), c.tokens, c.experts, c.top_k, renormalize, nullptr);
    EXPECT_EQ(download(d_ids.get(), pairs_n), ids) << "renormalize " << renormalize;
    expect_close(download(d_weights.get(), pairs_n), weights, 1e-7f, 1e-5f, "routing weights");

    for (int64_t tile_rows : {kMoeSmallTileRows, kMoeLargeTileRows}) {
      const int64_t max_tiles = moe_max_tiles(pairs_n, c.experts, tile_rows);
      DeviceBuffer<int32_t> d_pairs(pairs_n), d_row_of(pairs_n), d_count(1);
      DeviceBuffer<MoeTile> d_tiles(max_tiles);
      moe_align(d_ids.get(), c.tokens, c.top_k, c.experts, tile_rows, d_pairs.get(), d_row_of.get(), d_tiles.get(),
                d_count.get(), nullptr);
      const std::vector<int32_t> pairs = download(d_pairs.get(), pairs_n), row_of = download(d_row_of.get(), pairs_n);
      const int32_t num_tiles = download(d_count.get(), 1)[0];
      ASSERT_LE(num_tiles, max_tiles);
      const std::vector<MoeTile> tiles = download(d_tiles.get(), static_cast<size_t>(num_tiles));
      ExpertGroups want;
      group_by_expert(ids.data(), c.tokens, c.top_k, c.experts, 1, want);
      for (int64_t e = 0; e < c.experts; ++e) {  // the same pairs per expert, in any order inside its run
        const std::multiset<int32_t> got_set(pairs.begin() + want.offsets[e], pairs.begin() + want.offsets[e + 1]);
        const std::multiset<int32_t> want_set(want.pairs.begin() + want.offsets[e], want.pairs.begin() + want.offsets[e + 1]);
        ASSERT_EQ(got_set, want_set) << "expert " << e;
      }
      for (int64_t p = 0; p < pairs_n; ++p) ASSERT_EQ(pairs[row_of[p]], p);
      int64_t covered = 0;
      for (int32_t i = 0; i < num_tiles; ++i) {  // in order, inside one expert's run, at most tile_rows
        const MoeTile& t = tiles[i];
        ASSERT_EQ(t.begin, covered);
        ASSERT_GT(t.end, t.begin);
        ASSERT_LE(t.end - t.begin, tile_rows);
        ASSERT_GE(t.begin, want.offsets[t.expert]);
        ASSERT_LE(t.end, want.offsets[t.expert + 1]);
        covered = t.end;
      }
      EXPECT_EQ(covered, pairs_n);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Routings, MoeRouteAlign,
    ::testing::Values(RouteCase{1, 4, 2, Logits::kRandom}, RouteCase{5, 8, 2, Logits::kTiedPairs},
                      RouteCase{64, 128, 8, Logits::kRandom}, RouteCase{512, 128, 8, Logits::kRandom},
                      RouteCase{512, 128, 8, Logits::kZero}, RouteCase{300, 64, 6, Logits::kOneWins},
                      RouteCase{33, 1024, 32, Logits::kRandom}, RouteCase{512, 8, 1, Logits::kTiedPairs},
                      RouteCase{7, 3, 3, Logits::kRandom}),
    route_case_name);

struct GemmCase {
  int64_t tokens, experts, top_k, hidden, inter;
  Logits kind;
  bool fp8;
};

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// Expert weights [experts, rows, cols] as the kernel reads them and as floats (bf16 values, or
// the e4m3 codes' values times their row scales).
struct Weights {
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<float> values;
};

Weights make_weights(int64_t experts, int64_t rows, int64_t cols, bool fp8, uint32_t seed) {
  const Bf16Data d = random_bf16(static_cast<size_t>(experts * rows * cols), seed, -0.1f, 0.1f);
  Weights w{d.bits, {}, {}, d.values};
  if (!fp8) return w;
  const Fp8Matrix q = quantize_fp8_matrix(d.values.data(), experts * rows, cols);
  w.codes = q.codes;
  w.scales = q.scales;
  for (int64_t r = 0; r < experts * rows; ++r)
    for (int64_t j = 0; j < cols; ++j) w.values[r * cols + j] = fp8_decode(q.codes[r * cols + j]) * q.scales[r];
  return w;
}

class MoeGemm : public ::testing::TestWithParam<GemmCase> {};

std::string gemm_case_name(const ::testing::TestParamInfo<GemmCase>& info) {
  const GemmCase& c = info.param;
  return std::to_string(c.tokens) + "x" + std::to_string(c.experts) + "_top" + std::to_string(c.top_k) + "_h" +
         std::to_string(c.hidden) + "_i" + std::to_string(c.inter) + "_" + logits_name(c.kind) +
         (c.fp8 ? "_fp8" : "_bf16");
}

// route -> align -> gate/up (SiLU) -> down -> combine, each stage against its twin on the
// previous stage's device output.
TEST_P(MoeGemm, GroupedProjectionsAndCombineMatchTheCpuTwins) {
  OPTIMATE_REQUIRE_GPU();
  const GemmCase& c = GetParam();
  const int64_t T = c.tokens, E = c.experts, K = c.top_k, H = c.hidden, I = c.inter, P = T * K;
  const std::vector<float> logits = make_logits(c.kind, T, E, 3);
  const Bf16Data x = random_bf16(static_cast<size_t>(T * H), 4);
  const Weights gate_up = make_weights(E, 2 * I, H, c.fp8, 5), down = make_weights(E, H, I, c.fp8, 6);

  DeviceBuffer<float> d_logits = upload(logits);
  DeviceBuffer<int32_t> d_ids(P), d_pairs(P), d_row_of(P), d_count(1);
  DeviceBuffer<float> d_weights(P);
  moe_route(d_logits.get(), d_ids.get(), d_weights.get(), T, E, K, true, nullptr);
  const int64_t tile_rows = moe_tile_rows(P, E), max_tiles = moe_max_tiles(P, E, tile_rows);
  DeviceBuffer<MoeTile> d_tiles(max_tiles);
  moe_align(d_ids.get(), T, K, E, tile_rows, d_pairs.get(), d_row_of.get(), d_tiles.get(), d_count.get(), nullptr);
  const std::vector<int32_t> ids = download(d_ids.get(), P), pairs = download(d_pairs.get(), P),
                             row_of = download(d_row_of.get(), P);
  const std::vector<float> weights = download(d_weights.get(), P);
  std::vector<int32_t> row_expert(P);
  for (int64_t r = 0; r < P; ++r) row_expert[r] = ids[pairs[r]];

  DeviceBuffer<uint16_t> d_x = upload(x.bits);
  DeviceBuffer<uint16_t> d_gu = upload(gate_up.bf16), d_down = upload(down.bf16);
  DeviceBuffer<uint8_t> d_gu8 = upload(gate_up.codes), d_down8 = upload(down.codes);
  DeviceBuffer<float> d_gu_s = upload(gate_up.scales), d_down_s = upload(down.scales);
  DeviceBuffer<uint16_t> d_act(P * I), d_out(P * H);
  MoeGemmParams g;
  g.kind = MoeGemmKind::kSiluGateUp;
  g.a = bf16_ptr(d_x);
  g.pairs = d_pairs.get();
  g.top_k = K;
  if (c.fp8) {
    g.w_fp8 = reinterpret_cast<const __nv_fp8_e4m3*>(d_gu8.get());
    g.w_scale = d_gu_s.get();
  } else {
    g.w = bf16_ptr(d_gu);
  }
  g.num_experts = E;
  g.n = I;
  g.k = H;
  g.out = bf16_ptr(d_act);
  g.tiles = d_tiles.get();
  g.num_tiles = d_count.get();
  g.max_tiles = max_tiles;
  g.tile_rows = tile_rows;
  moe_gemm(g, nullptr);
  const std::vector<float> act = download_bf16(d_act.get(), P * I);

  std::vector<float> want_act(P * I);
  for (int64_t r = 0; r < P; ++r) {
    const float* xr = x.values.data() + (pairs[r] / K) * H;
    const float* w = gate_up.values.data() + static_cast<int64_t>(row_expert[r]) * 2 * I * H;
    for (int64_t j = 0; j < I; ++j) {
      double gs = 0, us = 0;
      for (int64_t h = 0; h < H; ++h) {
        gs += double(w[j * H + h]) * xr[h];
        us += double(w[(I + j) * H + h]) * xr[h];
      }
      const float gb = round_bf16(static_cast<float>(gs)), ub = round_bf16(static_cast<float>(us));
      want_act[r * I + j] = gb / (1.0f + std::exp(-gb)) * ub;
    }
  }
  expect_close(act, want_act, 1e-3f, 1e-2f, "gate/up with SiLU");

  MoeGemmParams d = g;
  d.kind = MoeGemmKind::kPlain;
  d.a = bf16_ptr(d_act);
  d.pairs = nullptr;
  d.w = c.fp8 ? nullptr : bf16_ptr(d_down);
  d.w_fp8 = c.fp8 ? reinterpret_cast<const __nv_fp8_e4m3*>(d_down8.get()) : nullptr;
  d.w_scale = c.fp8 ? d_down_s.get() : nullptr;
  d.n = H;
  d.k = I;
  d.out = bf16_ptr(d_out);
  moe_gemm(d, nullptr);
  const std::vector<float> out = download_bf16(d_out.get(), P * H);
  std::vector<float> want_out(P * H);
  for (int64_t r = 0; r < P; ++r) {
    const float* w = down.values.data() + static_cast<int64_t>(row_expert[r]) * H * I;
    for (int64_t j = 0; j < H; ++j) {
      double s = 0;
      for (int64_t i = 0; i < I; ++i) s += double(w[j * I + i]) * act[r * I + i];  // the device's act
      want_out[r * H + j] = static_cast<float>(s);
    }
  }
  expect_close(out, want_out, 1e-3f, 1e-2f, "down");

  // Combine, into each output: bf16 rows, the residual stream, fp32 parts.
  std::vector<float> sum(T * H, 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int64_t> slots(K);
    std::iota(slots.begin(), slots.end(), 0);
    std::sort(slots.begin(), slots.end(), [&](int64_t a, int64_t b) { return ids[t * K + a] < ids[t * K + b]; });
    for (int64_t s : slots)
      for (int64_t j = 0; j < H; ++j) sum[t * H + j] += out[row_of[t * K + s] * H + j] * weights[t * K + s];
  }
  const std::vector<float> residual0 = random_bf16(static_cast<size_t>(T * H), 8).values;
  DeviceBuffer<uint16_t> d_branch(T * H);
  DeviceBuffer<float> d_residual = upload(residual0), d_part(T * H);
  MoeCombineParams m{bf16_ptr(d_out), d_ids.get(), d_weights.get(), d_row_of.get(), T, K, H};
  for (MoeCombineOutput o : {MoeCombineOutput::kBf16, MoeCombineOutput::kAddResidual, MoeCombineOutput::kF32}) {
    m.output = o;
    m.out_bf16 = bf16_ptr(d_branch);
    m.residual = d_residual.get();
    m.out_f32 = d_part.get();
    moe_combine(m, nullptr);
  }
  std::vector<float> want_branch(T * H), want_residual(T * H);
  for (int64_t i = 0; i < T * H; ++i) {
    want_branch[i] = round_bf16(sum[i]);
    want_residual[i] = residual0[i] + round_bf16(sum[i]);
  }
  expect_close(download_bf16(d_branch.get(), T * H), want_branch, 1e-6f, 1e-2f, "combine into bf16");
  expect_close(download(d_residual.get(), T * H), want_residual, 1e-5f, 1e-2f, "combine into the residual");
  expect_close(download(d_part.get(), T * H), sum, 1e-6f, 1e-5f, "combine in fp32");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeGemm,
    ::testing::Values(
        GemmCase{1, 4, 2, 64, 32, Logits::kRandom, false},       // decode of a tiny model
        GemmCase{1, 128, 8, 256, 96, Logits::kRandom, false},    // batch-1 decode, many experts
        GemmCase{8, 16, 2, 128, 64, Logits::kZero, false},       // every token on experts 0 and 1
        GemmCase{64, 128, 8, 256, 64, Logits::kRandom, false},   // batch 64: small tiles
        GemmCase{512, 128, 8, 128, 64, Logits::kRandom, false},  // 4096 pairs: 64-row tiles
        GemmCase{512, 8, 2, 64, 48, Logits::kOneWins, false},    // one expert takes every token
        GemmCase{200, 32, 4, 136, 40, Logits::kTiedPairs, false},  // n and k not multiples of the tiles
        GemmCase{1, 128, 8, 256, 96, Logits::kRandom, true},     // FP8 weights, small tiles
        GemmCase{512, 16, 2, 128, 64, Logits::kRandom, true}),   // FP8 weights, 64-row tiles
    gemm_case_name);

TEST(MoeKernels, LaunchersRefuseShapesTheKernelsDoNotTake) {
  MoeGemmParams p;
  p.w = reinterpret_cast<const __nv_bfloat16*>(16);
  p.n = 12;  // not a multiple of 8
  p.k = 64;
  p.tile_rows = kMoeSmallTileRows;
  EXPECT_THROW(moe_gemm(p, nullptr), Error);
  p.n = 16;
  p.tile_rows = 32;
  EXPECT_THROW(moe_gemm(p, nullptr), Error);
  EXPECT_THROW(moe_route(nullptr, nullptr, nullptr, 1, 8, 9, true, nullptr), Error);
  EXPECT_THROW(moe_route(nullptr, nullptr, nullptr, 1, 2048, 2, true, nullptr), Error);
  EXPECT_THROW(qk_norm(nullptr, 256, nullptr, nullptr, 1, 2, 1, 96, 1e-6f, nullptr), Error);
}

// Qwen3's per-head norm: bf16(weight * bf16(x / rms(x))) for every q and k head, v untouched.
TEST(QkNorm, MatchesQwen3sPerHeadRmsNorm) {
  OPTIMATE_REQUIRE_GPU();
  for (int64_t d : {64, 128}) {
    const int64_t T = 37, heads = 8, kv = 2, stride = (heads + 2 * kv) * d;
    const Bf16Data qkv = random_bf16(static_cast<size_t>(T * stride), 21, -3.0f, 3.0f);
    const Bf16Data qw = random_bf16(static_cast<size_t>(d), 22, 0.5f, 1.5f), kw = random_bf16(static_cast<size_t>(d), 23, 0.5f, 1.5f);
    DeviceBuffer<uint16_t> d_qkv = upload(qkv.bits), d_qw = upload(qw.bits), d_kw = upload(kw.bits);
    const float eps = 1e-6f;
    qk_norm(bf16_ptr(d_qkv), stride, bf16_ptr(d_qw), bf16_ptr(d_kw), T, heads, kv, d, eps, nullptr);
    std::vector<float> want = qkv.values;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads + kv; ++h) {
        float* x = want.data() + t * stride + h * d;
        const std::vector<float>& w = h < heads ? qw.values : kw.values;
        double ss = 0;
        for (int64_t i = 0; i < d; ++i) ss += double(x[i]) * x[i];
        const float inv = 1.0f / std::sqrt(static_cast<float>(ss / d) + eps);
        for (int64_t i = 0; i < d; ++i) x[i] = round_bf16(w[i] * round_bf16(x[i] * inv));
      }
    expect_close(download_bf16(d_qkv.get(), T * stride), want, 1e-6f, 8e-3f, "qk_norm d=" + std::to_string(d));
  }
}

}  // namespace
}  // namespace optimate::cuda
