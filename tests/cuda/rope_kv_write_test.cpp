// RoPE + KV write in one launch (rope_kv_write.h) against its CPU twins: q and k rotated as the
// fp64 rotary reference does (within bf16 rounding), v untouched, and every cache row holding
// exactly what kv::store_row writes for the rotated k and the v the kernel leaves in the QKV
// buffer, in bf16, fp8, int8 and int4 blocks alike; and against the two kernels it replaces
// (rope_inplace, then kv_cache_write), byte for byte.
#include <cmath>

#include "backend/cuda/kv_cache_write.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/rope_kv_write.h"
#include "core/error.h"
#include "mixed_kv_cache.h"
#include "model/model_config.h"
#include "small_models.h"

namespace optimate::cuda {
namespace {

using namespace testing;

constexpr KvPrecision kAll[] = {KvPrecision::kBF16, KvPrecision::kFP8, KvPrecision::kInt8, KvPrecision::kInt4};

std::vector<float> llama3_inv_freq(int64_t head_dim) { return rope_inv_freq(llama3_rope_config(head_dim)); }

// q and k heads of each row rotated in fp64 (rope.h's pairs (i, i + D/2)), v as it was.
std::vector<float> rotated_reference(const std::vector<float>& qkv, const std::vector<int32_t>& pos,
                                     const std::vector<float>& inv_freq, int64_t stride, int64_t rotated_heads,
                                     int64_t D) {
  std::vector<float> ref = qkv;
  for (size_t t = 0; t < pos.size(); ++t)
    for (int64_t h = 0; h < rotated_heads; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double a = double(float(pos[t]) * inv_freq[i]);
        const float* x = qkv.data() + t * stride + h * D;
        ref[t * stride + h * D + i] = float(x[i] * std::cos(a) - x[i + D / 2] * std::sin(a));
        ref[t * stride + h * D + i + D / 2] = float(x[i + D / 2] * std::cos(a) + x[i] * std::sin(a));
      }
  return ref;
}

TEST(RopeKvWrite, RotatesInPlaceAndStoresEachTokenAtItsBlocksPrecisionAsStoreRow) {
  OPTIMATE_REQUIRE_GPU();
  struct Case { int64_t heads, kv_heads, head_dim; };
  for (const Case& cs : {Case{4, 2, 128}, Case{6, 3, 64}, Case{32, 8, 128}}) {
    const int64_t D = cs.head_dim, hkv = cs.kv_heads, bs = 16, q_dim = cs.heads * D;
    const int64_t stride = q_dim + 2 * hkv * D;
    MixedKvCache c(hkv, bs, D, 8);
    std::vector<int32_t> entries;
    for (KvPrecision p : kAll) entries.push_back(c.new_block(p));
    // Eleven tokens over the four precisions at scattered rows, and a padding row (-1: rotated,
    // not stored). Positions up to 131071 take sincosf's slow argument reduction.
    const int64_t T = 12;
    std::vector<int32_t> targets, pos;
    for (int64_t t = 0; t + 1 < T; ++t) {
      const int32_t e = entries[t % 4];
      targets.push_back(kv_write_target(kv::entry_code(e), kv::entry_slot(e), static_cast<int>(bs),
                                        static_cast<int>((5 * t + 1) % bs)));
      pos.push_back(static_cast<int32_t>(t < 6 ? t * 37 : 131071 - t));
    }
    targets.push_back(-1);
    pos.push_back(17);
    const std::vector<float> inv_freq = llama3_inv_freq(D);
    const Bf16Data qkv = random_bf16(T * stride, 61, -3.0f, 2.0f);
    auto d_pos = upload(pos);
    auto d_targets = upload(targets);
    auto d_freq = upload(inv_freq);
    const std::string what = "rope_kv_write heads " + std::to_string(cs.heads) + "/" + std::to_string(hkv) + " D " +
                             std::to_string(D);

    auto d_qkv = upload(qkv.bits);
    DeviceBuffer<uint8_t> d_k = upload(c.k), d_v = upload(c.v);
    const KvArena arena{d_k.get(), d_v.get(), c.layout.slot_bytes, true};
    rope_kv_write(bf16_ptr(d_qkv), stride, d_pos.get(), d_freq.get(), arena, d_targets.get(), T, cs.heads, hkv, bs,
                  D, nullptr);
    const std::vector<float> got = download_bf16(d_qkv.get(), T * stride);
    expect_close(got, rotated_reference(qkv.values, pos, inv_freq, stride, cs.heads + hkv, D), 1e-2f, 1e-2f,
                 what + " q, k (and v untouched)");
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = q_dim + hkv * D; j < stride; ++j)
        ASSERT_EQ(got[t * stride + j], qkv.values[t * stride + j]) << what << " v changed, token " << t;

    // The CPU twin of the cache rows, over the rotated k the kernel left in the buffer.
    std::vector<uint8_t> want_k = c.k, want_v = c.v;
    for (int64_t t = 0; t + 1 < T; ++t) {
      const int32_t e = entries[t % 4];
      for (int64_t h = 0; h < hkv; ++h) {
        kv::store_row(c.block_layout(e), c.block(want_k, e), h, (5 * t + 1) % bs, got.data() + t * stride + q_dim + h * D);
        kv::store_row(c.block_layout(e), c.block(want_v, e), h, (5 * t + 1) % bs,
                      got.data() + t * stride + q_dim + (hkv + h) * D);
      }
    }
    expect_bytes_equal(download(d_k.get(), c.k.size()), want_k, what + " K");
    expect_bytes_equal(download(d_v.get(), c.v.size()), want_v, what + " V");

    // The two kernels it replaces leave the same bytes everywhere.
    auto d_qkv2 = upload(qkv.bits);
    DeviceBuffer<uint8_t> d_k2 = upload(c.k), d_v2 = upload(c.v);
    rope_inplace(bf16_ptr(d_qkv2), stride, d_pos.get(), d_freq.get(), T, cs.heads, hkv, D, nullptr);
    kv_cache_write(bf16_ptr(d_qkv2) + q_dim, bf16_ptr(d_qkv2) + q_dim + hkv * D, stride,
                   {d_k2.get(), d_v2.get(), c.layout.slot_bytes, true}, d_targets.get(), T, hkv, bs, D, nullptr);
    EXPECT_EQ(download(d_qkv.get(), T * stride), download(d_qkv2.get(), T * stride)) << what << " vs two kernels";
    expect_bytes_equal(download(d_k.get(), c.k.size()), download(d_k2.get(), c.k.size()), what + " K vs two kernels");
    expect_bytes_equal(download(d_v.get(), c.v.size()), download(d_v2.get(), c.v.size()), what + " V vs two kernels");
  }
}

// A cache of bf16 blocks only (the kernels index it as plain bf16): each written row holds the
// rotated k and the v of its token, bit for bit; rows not written keep their poison.
TEST(RopeKvWrite, Bf16OnlyCacheHoldsTheRotatedKeysAndValues) {
  OPTIMATE_REQUIRE_GPU();
  const int64_t heads = 8, hkv = 2, D = 128, bs = 16, blocks = 4, T = 7;
  const int64_t q_dim = heads * D, stride = q_dim + 2 * hkv * D + 8;  // padded rows
  const std::vector<int32_t> slots = {3, 16, 17, 63, -1, 40, 0};
  const std::vector<int32_t> pos = {3, 0, 1, 4000, 9, 77, 8191};
  const std::vector<float> inv_freq = llama3_inv_freq(D);
  const Bf16Data qkv = random_bf16(T * stride, 62);
  auto d_qkv = upload(qkv.bits);
  auto d_pos = upload(pos);
  auto d_slots = upload(slots);
  auto d_freq = upload(inv_freq);
  const std::vector<uint16_t> poison(blocks * hkv * bs * D, kPoisonBf16);
  auto d_k = upload(poison), d_v = upload(poison);
  rope_kv_write(bf16_ptr(d_qkv), stride, d_pos.get(), d_freq.get(), bf16_arena(d_k, d_v, hkv, bs, D), d_slots.get(),
                T, heads, hkv, bs, D, nullptr);
  const std::vector<uint16_t> got = download(d_qkv.get(), T * stride);
  std::vector<uint16_t> want_k = poison, want_v = poison;
  for (int64_t t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    const int64_t block = slots[t] / bs, token = slots[t] % bs;
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t d = 0; d < D; ++d) {
        const int64_t dst = ((block * hkv + h) * bs + token) * D + d;
        want_k[dst] = got[t * stride + q_dim + h * D + d];
        want_v[dst] = got[t * stride + q_dim + (hkv + h) * D + d];
      }
  }
  EXPECT_EQ(download(d_k.get(), poison.size()), want_k) << "K";
  EXPECT_EQ(download(d_v.get(), poison.size()), want_v) << "V";
  std::vector<float> got_f(got.size());
  for (size_t i = 0; i < got.size(); ++i) got_f[i] = bf16_to_f32(got[i]);
  expect_close(got_f, rotated_reference(qkv.values, pos, inv_freq, stride, heads + hkv, D), 1e-2f, 1e-2f,
               "rope_kv_write bf16 cache: q, k");
}

TEST(RopeKvWrite, ShapesItDoesNotTakeAreErrors) {
  OPTIMATE_REQUIRE_GPU();
  EXPECT_FALSE(rope_kv_write_fits(96, 96 * 12));
  EXPECT_FALSE(rope_kv_write_fits(128, 128 * 12 + 2));
  EXPECT_TRUE(rope_kv_write_fits(64, 64 * 12));
  DeviceBuffer<uint16_t> qkv(96 * 12), k(96 * 16), v(96 * 16);
  EXPECT_THROW(rope_kv_write(bf16_ptr(qkv), 96 * 12, nullptr, nullptr, bf16_arena(k, v, 1, 16, 96), nullptr, 1, 10, 1,
                             16, 96, nullptr),
               Error);
}

}  // namespace
}  // namespace optimate::cuda
