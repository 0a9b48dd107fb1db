// Paged decode attention (split-K, GQA packed) and tiled tensor-core prefill attention against
// a CPU twin, over odd lengths, block boundaries, several GQA ratios and split counts.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cuda/kv_cache_write.h"
#include "backend/cuda/paged_attention.h"
#include "backend/cuda/prefill_attention.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;

struct Shape {
  int64_t num_heads, num_kv_heads, head_dim;
};

// A paged cache filled with random K/V and one shuffled block table per sequence.
struct CacheFixture {
  int64_t hkv, d, bs, num_blocks;
  Bf16Data k, v;
  std::vector<std::vector<int32_t>> tables;  // per sequence
  int64_t max_blocks = 0;

  CacheFixture(const Shape& s, const std::vector<int64_t>& seq_lens, uint32_t seed, int64_t block_size = 16)
      : hkv(s.num_kv_heads), d(s.head_dim), bs(block_size) {
    int64_t total = 0;
    for (int64_t len : seq_lens) {
      max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
      total += (len + bs - 1) / bs;
    }
    num_blocks = total + 3;
    k = random_bf16(num_blocks * hkv * bs * d, seed);
    v = random_bf16(num_blocks * hkv * bs * d, seed + 1);
    std::vector<int32_t> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed + 2));
    size_t next = 0;
    for (int64_t len : seq_lens) {
      std::vector<int32_t> t((len + bs - 1) / bs);
      for (auto& b : t) b = ids[next++];
      tables.push_back(t);
    }
  }
  std::vector<int32_t> packed_tables() const {
    std::vector<int32_t> out(tables.size() * max_blocks, 0);
    for (size_t i = 0; i < tables.size(); ++i) std::copy(tables[i].begin(), tables[i].end(), out.begin() + i * max_blocks);
    return out;
  }
  float at(const std::vector<float>& cache, int64_t seq, int64_t pos, int64_t h, int64_t i) const {
    const int64_t blk = tables[seq][pos / bs];
    return cache[((blk * hkv + h) * bs + pos % bs) * d + i];
  }
};

// CPU twin: softmax(q k^T * scale) v over keys [0, ctx) of `seq`, fp64 accumulation.
std::vector<float> reference_attention(const CacheFixture& c, const Shape& s, const float* q, int64_t seq, int64_t ctx) {
  const int64_t D = s.head_dim, G = s.num_heads / s.num_kv_heads;
  std::vector<float> out(s.num_heads * D, 0.0f);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int64_t h = 0; h < s.num_heads; ++h) {
    const int64_t kvh = h / G;
    std::vector<double> sc(ctx);
    double mx = -1e300;
    for (int64_t p = 0; p < ctx; ++p) {
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) dot += double(q[h * D + i]) * c.at(c.k.values, seq, p, kvh, i);
      sc[p] = dot * scale;
      mx = std::max(mx, sc[p]);
    }
    double sum = 0;
    for (auto& x : sc) sum += (x = std::exp(x - mx));
    for (int64_t i = 0; i < D; ++i) {
      double o = 0;
      for (int64_t p = 0; p < ctx; ++p) o += sc[p] * c.at(c.v.values, seq, p, kvh, i);
      out[h * D + i] = ctx > 0 ? float(o / sum) : 0.0f;
    }
  }
  return out;
}

class DecodeAttention : public ::testing::TestWithParam<Shape> {};

TEST_P(DecodeAttention, MatchesCpuTwinForEverySplitCount) {
  OPTIMATE_REQUIRE_GPU();
  const Shape s = GetParam();
  const std::vector<int64_t> lens = {1, 15, 16, 17, 300, 1000, 2049};
  // 32-token blocks for the GQA-4 shape: chunks of 16 keys then start inside a block.
  CacheFixture c(s, lens, 11, s.num_heads == 4 * s.num_kv_heads ? 32 : 16);
  const int64_t S = lens.size(), D = s.head_dim, qd = s.num_heads * D;
  const int64_t stride = qd + 2 * s.num_kv_heads * D;  // q sits in a fused QKV row
  const Bf16Data q = random_bf16(S * stride, 12, -2.0f, 2.0f);
  std::vector<int32_t> row_seq(S), row_ctx(S);
  for (int64_t r = 0; r < S; ++r) row_seq[r] = int32_t(r), row_ctx[r] = int32_t(lens[r]);
  auto d_q = upload(q.bits);
  auto d_k = upload(c.k.bits);
  auto d_v = upload(c.v.bits);
  auto d_tables = upload(c.packed_tables());
  auto d_seq = upload(row_seq);
  auto d_ctx = upload(row_ctx);
  std::vector<float> ref;
  for (int64_t r = 0; r < S; ++r) {
    std::vector<float> qr(q.values.begin() + r * stride, q.values.begin() + r * stride + qd);
    const auto o = reference_attention(c, s, qr.data(), r, lens[r]);
    ref.insert(ref.end(), o.begin(), o.end());
  }
  for (auto kernel : {DecodeAttentionKernel::kCudaCores, DecodeAttentionKernel::kTensorCores})
  for (int splits : {1, 2, 7, 64}) {
    DeviceBuffer<uint16_t> d_out(S * qd);
    std::vector<uint16_t> poison(S * qd, kPoisonBf16);
    OPTIMATE_CUDA_CHECK(cudaMemcpy(d_out.get(), poison.data(), poison.size() * 2, cudaMemcpyHostToDevice));
    DeviceBuffer<float> ws(std::max<int64_t>(1, paged_attention_workspace_floats(S, s.num_heads, splits, D)));
    PagedAttentionParams p;
    p.q = bf16_ptr(d_q);
    p.q_row_stride = stride;
    p.k_cache = bf16_ptr(d_k);
    p.v_cache = bf16_ptr(d_v);
    p.row_seq = d_seq.get();
    p.row_ctx = d_ctx.get();
    p.block_tables = d_tables.get();
    p.max_blocks_per_seq = c.max_blocks;
    p.out = bf16_ptr(d_out);
    p.out_row_stride = qd;
    p.workspace = ws.get();
    p.num_rows = S;
    p.num_heads = s.num_heads;
    p.num_kv_heads = s.num_kv_heads;
    p.head_dim = D;
    p.block_size = c.bs;
    p.num_splits = splits;
    p.scale = 1.0f / std::sqrt(float(D));
    p.kernel = kernel;
    paged_attention(p, nullptr);
    const std::string what = std::string(kernel == DecodeAttentionKernel::kTensorCores ? "tensor-core" : "CUDA-core") +
                             " decode attention heads " + std::to_string(s.num_heads) + "/" +
                             std::to_string(s.num_kv_heads) + " d " + std::to_string(D) + " splits " +
                             std::to_string(splits);
    expect_close(download_bf16(d_out.get(), S * qd), ref, 1e-2f, 2e-2f, what);
    // Combining in the same launch (split counters); twice, so the counters must reset.
    DeviceBuffer<int> counters(S * s.num_kv_heads);
    OPTIMATE_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
    p.split_counters = counters.get();
    p.prior_keys_stable = true;  // the tensor-core kernel's early loads (same results)
    for (int rep = 0; rep < 2; ++rep) {
      OPTIMATE_CUDA_CHECK(cudaMemcpy(d_out.get(), poison.data(), poison.size() * 2, cudaMemcpyHostToDevice));
      paged_attention(p, nullptr);
      expect_close(download_bf16(d_out.get(), S * qd), ref, 1e-2f, 2e-2f, what + " (in-launch combine)");
    }
    EXPECT_EQ(download(counters.get(), S * s.num_kv_heads), std::vector<int>(S * s.num_kv_heads, 0)) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeAttention,
                         ::testing::Values(Shape{32, 8, 128}, Shape{9, 3, 64}, Shape{14, 2, 64},
                                           Shape{4, 4, 128}, Shape{16, 2, 128}));

// Prefill: five sequences, chunks that start after earlier context, lengths off the tile
// and block grid. Both the tensor-core tiles and the single-row fallback are checked.
class PrefillAttention : public ::testing::TestWithParam<Shape> {};

TEST_P(PrefillAttention, CausalChunksMatchCpuTwin) {
  OPTIMATE_REQUIRE_GPU();
  const Shape s = GetParam();
  struct Chunk { int64_t start, n; };
  const std::vector<Chunk> chunks = {{0, 130}, {37, 70}, {200, 1}, {0, 64}, {5, 300}};
  std::vector<int64_t> lens;
  for (auto& ch : chunks) lens.push_back(ch.start + ch.n);
  CacheFixture c(s, lens, 21);
  const int64_t D = s.head_dim, qd = s.num_heads * D, stride = qd + 2 * s.num_kv_heads * D;
  int64_t T = 0;
  for (auto& ch : chunks) T += ch.n;
  const Bf16Data q = random_bf16(T * stride, 22, -2.0f, 2.0f);
  std::vector<int32_t> tiles, rows, row_seq, row_ctx;
  std::vector<float> ref;
  int64_t t0 = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    for (int64_t j = 0; j < chunks[i].n; j += kPrefillTileRows)
      tiles.insert(tiles.end(), {int32_t(t0 + j), int32_t(std::min<int64_t>(kPrefillTileRows, chunks[i].n - j)),
                                 int32_t(chunks[i].start + j), int32_t(i)});
    for (int64_t j = 0; j < chunks[i].n; ++j) {
      rows.push_back(int32_t(t0 + j));
      row_seq.push_back(int32_t(i));
      row_ctx.push_back(int32_t(chunks[i].start + j + 1));
      const auto o = reference_attention(c, s, q.values.data() + (t0 + j) * stride, i, chunks[i].start + j + 1);
      ref.insert(ref.end(), o.begin(), o.end());
    }
    t0 += chunks[i].n;
  }
  auto d_q = upload(q.bits);
  auto d_k = upload(c.k.bits);
  auto d_v = upload(c.v.bits);
  auto d_tables = upload(c.packed_tables());
  auto d_tiles = upload(tiles);
  auto d_rows = upload(rows);
  auto d_seq = upload(row_seq);
  auto d_ctx = upload(row_ctx);
  const std::string name = "heads " + std::to_string(s.num_heads) + "/" + std::to_string(s.num_kv_heads) + " d " + std::to_string(D);
  {
    DeviceBuffer<uint16_t> d_out(T * qd);
    OPTIMATE_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, d_out.bytes()));
    PrefillAttentionParams p;
    p.q = bf16_ptr(d_q);
    p.q_row_stride = stride;
    p.k_cache = bf16_ptr(d_k);
    p.v_cache = bf16_ptr(d_v);
    p.tiles = d_tiles.get();
    p.block_tables = d_tables.get();
    p.max_blocks_per_seq = c.max_blocks;
    p.out = bf16_ptr(d_out);
    p.out_row_stride = qd;
    p.num_tiles = tiles.size() / 4;
    p.num_heads = s.num_heads;
    p.num_kv_heads = s.num_kv_heads;
    p.head_dim = D;
    p.block_size = c.bs;
    p.scale = 1.0f / std::sqrt(float(D));
    prefill_attention(p, nullptr);
    expect_close(download_bf16(d_out.get(), T * qd), ref, 1.5e-2f, 2e-2f, "prefill (tensor cores) " + name);
  }
  {
    DeviceBuffer<uint16_t> d_out(T * qd);
    OPTIMATE_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, d_out.bytes()));
    PagedAttentionParams p;
    p.q = bf16_ptr(d_q);
    p.q_row_stride = stride;
    p.k_cache = bf16_ptr(d_k);
    p.v_cache = bf16_ptr(d_v);
    p.rows = d_rows.get();
    p.row_seq = d_seq.get();
    p.row_ctx = d_ctx.get();
    p.block_tables = d_tables.get();
    p.max_blocks_per_seq = c.max_blocks;
    p.out = bf16_ptr(d_out);
    p.out_row_stride = qd;
    p.num_rows = T;
    p.num_heads = s.num_heads;
    p.num_kv_heads = s.num_kv_heads;
    p.head_dim = D;
    p.block_size = c.bs;
    p.scale = 1.0f / std::sqrt(float(D));
    paged_attention(p, nullptr);
    expect_close(download_bf16(d_out.get(), T * qd), ref, 1e-2f, 2e-2f, "prefill (row kernel) " + name);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillAttention,
                         ::testing::Values(Shape{32, 8, 128}, Shape{9, 3, 64}, Shape{4, 4, 128}));

TEST(KvCacheWrite, ScattersTokensToTheirSlotsAndSkipsNegativeSlots) {
  OPTIMATE_REQUIRE_GPU();
  const int64_t hkv = 3, d = 64, bs = 16, nb = 5, T = 4, q_dim = 9 * d;
  const int64_t stride = q_dim + 2 * hkv * d;
  const Bf16Data qkv = random_bf16(T * stride, 31);
  const std::vector<int32_t> slots = {0, 17, 79, -1};
  auto d_qkv = upload(qkv.bits);
  auto d_slots = upload(slots);
  std::vector<uint16_t> zeros(nb * hkv * bs * d, 0);
  auto d_k = upload(zeros);
  auto d_v = upload(zeros);
  kv_cache_write(bf16_ptr(d_qkv) + q_dim, bf16_ptr(d_qkv) + q_dim + hkv * d, stride, bf16_ptr(d_k), bf16_ptr(d_v),
                 d_slots.get(), T, hkv, bs, d, nullptr);
  std::vector<float> ref_k(zeros.size(), 0.0f), ref_v(zeros.size(), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t i = 0; i < d; ++i) {
        const int64_t dst = ((slots[t] / bs * hkv + h) * bs + slots[t] % bs) * d + i;
        ref_k[dst] = qkv.values[t * stride + q_dim + h * d + i];
        ref_v[dst] = qkv.values[t * stride + q_dim + hkv * d + h * d + i];
      }
  }
  expect_close(download_bf16(d_k.get(), zeros.size()), ref_k, 0.0f, 0.0f, "k cache");
  expect_close(download_bf16(d_v.get(), zeros.size()), ref_v, 0.0f, 0.0f, "v cache");
}

}  // namespace
}  // namespace optimate::cuda
