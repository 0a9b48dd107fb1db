// The attention kernels' checks against an fp64 CPU twin, shared by the bf16 cache tests and
// the quantized ones: decode rows through the split kernels at several split counts (combined
// by a second kernel, then in the launch, twice, so the split counters must reset), through the
// head-cluster kernel at every cluster size, and causal prefill chunks through the tensor-core
// tiles and the single-row fallback.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/paged_attention.h"
#include "backend/cuda/paged_attention_heads.h"
#include "backend/cuda/prefill_attention.h"
#include "core/error.h"
#include "test_util.h"

namespace optimate::cuda::testing {

struct AttentionShape {
  int64_t num_heads, num_kv_heads, head_dim;
};

inline std::string shape_name(const AttentionShape& s) {
  return "heads " + std::to_string(s.num_heads) + "/" + std::to_string(s.num_kv_heads) + " d " +
         std::to_string(s.head_dim);
}

// A cache on the device and what its kernels should read from it.
struct AttentionCache {
  KvArena arena;
  int64_t block_size = 16;
  int64_t max_blocks = 0;
  std::vector<int32_t> tables;                     // [sequences, max_blocks] entries
  std::vector<std::vector<float>> k_vals, v_vals;  // per sequence [pos, kv head, head_dim]
};

// softmax(q k^T / sqrt(d)) v over positions [0, ctx) of sequence `seq`, fp64 accumulation; q
// is one token's [num_heads, head_dim].
inline std::vector<float> reference_attention(const AttentionCache& c, const AttentionShape& s, const float* q,
                                              int64_t seq, int64_t ctx) {
  const int64_t D = s.head_dim, hkv = s.num_kv_heads, G = s.num_heads / hkv;
  const std::vector<float>& k = c.k_vals[seq];
  const std::vector<float>& v = c.v_vals[seq];
  std::vector<float> out(s.num_heads * D, 0.0f);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int64_t h = 0; h < s.num_heads; ++h) {
    const int64_t kvh = h / G;
    std::vector<double> sc(ctx);
    double mx = -1e300;
    for (int64_t p = 0; p < ctx; ++p) {
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) dot += double(q[h * D + i]) * k[(p * hkv + kvh) * D + i];
      sc[p] = dot * scale;
      mx = std::max(mx, sc[p]);
    }
    double sum = 0;
    for (auto& x : sc) sum += (x = std::exp(x - mx));
    for (int64_t i = 0; i < D; ++i) {
      double o = 0;
      for (int64_t p = 0; p < ctx; ++p) o += sc[p] * v[(p * hkv + kvh) * D + i];
      out[h * D + i] = ctx > 0 ? float(o / sum) : 0.0f;
    }
  }
  return out;
}

// Params of single-query rows (decode, or prefill tokens as rows) over the cache; q rows sit in
// fused QKV rows of `q_stride`.
inline PagedAttentionParams row_params(const AttentionCache& c, const AttentionShape& s, const uint16_t* q,
                                       int64_t q_stride, const int32_t* tables, const int32_t* row_seq,
                                       const int32_t* row_ctx, int64_t num_rows, uint16_t* out) {
  PagedAttentionParams p;
  p.q = reinterpret_cast<const __nv_bfloat16*>(q);
  p.q_row_stride = q_stride;
  p.cache = c.arena;
  p.row_seq = row_seq;
  p.row_ctx = row_ctx;
  p.block_tables = tables;
  p.max_blocks_per_seq = c.max_blocks;
  p.out = reinterpret_cast<__nv_bfloat16*>(out);
  p.out_row_stride = s.num_heads * s.head_dim;
  p.num_rows = num_rows;
  p.num_heads = s.num_heads;
  p.num_kv_heads = s.num_kv_heads;
  p.head_dim = s.head_dim;
  p.block_size = c.block_size;
  p.scale = 1.0f / std::sqrt(float(s.head_dim));
  return p;
}

// One decode row per sequence over its first lens[r] positions, every kernel and split count.
inline void check_decode_attention(const AttentionCache& c, const AttentionShape& s, const std::vector<int64_t>& lens,
                                   const std::vector<int>& split_counts, uint32_t seed, const std::string& what) {
  const int64_t S = lens.size(), D = s.head_dim, qd = s.num_heads * D;
  const int64_t stride = qd + 2 * s.num_kv_heads * D;  // q sits in a fused QKV row
  const Bf16Data q = random_bf16(S * stride, seed, -2.0f, 2.0f);
  std::vector<int32_t> row_seq(S), row_ctx(S);
  std::vector<float> ref;
  for (int64_t r = 0; r < S; ++r) {
    row_seq[r] = int32_t(r), row_ctx[r] = int32_t(lens[r]);
    const auto o = reference_attention(c, s, q.values.data() + r * stride, r, lens[r]);
    ref.insert(ref.end(), o.begin(), o.end());
  }
  auto d_q = upload(q.bits);
  auto d_tables = upload(c.tables);
  auto d_seq = upload(row_seq);
  auto d_ctx = upload(row_ctx);
  const std::vector<uint16_t> poison(S * qd, kPoisonBf16);
  for (auto kernel : {DecodeAttentionKernel::kCudaCores, DecodeAttentionKernel::kTensorCores})
    for (int splits : split_counts) {
      DeviceBuffer<uint16_t> d_out(S * qd);
      DeviceBuffer<float> ws(std::max<int64_t>(1, paged_attention_workspace_floats(S, s.num_heads, splits, D)));
      DeviceBuffer<int> counters(S * s.num_kv_heads);
      OPTIMATE_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
      PagedAttentionParams p = row_params(c, s, d_q.get(), stride, d_tables.get(), d_seq.get(), d_ctx.get(), S, d_out.get());
      p.workspace = ws.get();
      p.num_splits = splits;
      p.kernel = kernel;
      const std::string name = what + ", " + (kernel == DecodeAttentionKernel::kTensorCores ? "tensor-core" : "CUDA-core") +
                               " decode, " + shape_name(s) + ", splits " + std::to_string(splits);
      // A second kernel combines the splits; then the last block of each (row, kv head) does,
      // twice, so the counters must reset. The tensor-core kernel's early loads come along.
      for (int run = 0; run < 3; ++run) {
        p.split_counters = run > 0 ? counters.get() : nullptr;
        p.prior_keys_stable = run > 0;
        OPTIMATE_CUDA_CHECK(cudaMemcpy(d_out.get(), poison.data(), poison.size() * 2, cudaMemcpyHostToDevice));
        paged_attention(p, nullptr);
        expect_close(download_bf16(d_out.get(), S * qd), ref, 1e-2f, 2e-2f,
                     name + (run > 0 ? " (in-launch combine)" : ""));
      }
      EXPECT_EQ(download(counters.get(), S * s.num_kv_heads), std::vector<int>(S * s.num_kv_heads, 0)) << name;
      if (::testing::Test::HasFailure()) return;  // one case's mismatches are enough to read
    }
  // The head-cluster kernel at each cluster size and both block sizes (cluster 0: kAuto
  // through paged_attention, as the runner launches it, which takes the head clusters for few
  // rows on the Hopper path and the split kernel on the portable one), without and with early
  // loads; it needs no workspace nor counters. The portable path refuses the clusters.
  const bool clusters = device_kernel_paths().head_clusters;
  const std::pair<int, int> clusters_warps[] = {{0, 8}, {1, 8}, {2, 8}, {4, 8}, {8, 8}, {1, 4}, {8, 4}};
  for (auto [cluster, warps] : clusters_warps) {
    if (cluster && !clusters) {
      PagedAttentionParams p = row_params(c, s, d_q.get(), stride, d_tables.get(), d_seq.get(), d_ctx.get(), S, nullptr);
      EXPECT_THROW(paged_attention_head_clusters(p, cluster, nullptr, warps), Error) << "portable path, cluster " << cluster;
      continue;
    }
    DeviceBuffer<uint16_t> d_out(S * qd);
    PagedAttentionParams p = row_params(c, s, d_q.get(), stride, d_tables.get(), d_seq.get(), d_ctx.get(), S, d_out.get());
    p.kernel = cluster ? DecodeAttentionKernel::kHeadClusters : DecodeAttentionKernel::kAuto;
    const std::string name = what + ", " + shape_name(s) +
                             (cluster ? ", head-cluster decode, cluster " + std::to_string(cluster) + " of " +
                                            std::to_string(warps) + "-warp blocks"
                                      : std::string(", decode as kAuto dispatches it"));
    for (int run = 0; run < 2; ++run) {
      p.prior_keys_stable = run > 0;
      OPTIMATE_CUDA_CHECK(cudaMemcpy(d_out.get(), poison.data(), poison.size() * 2, cudaMemcpyHostToDevice));
      if (cluster) paged_attention_head_clusters(p, cluster, nullptr, warps);
      else paged_attention(p, nullptr);
      expect_close(download_bf16(d_out.get(), S * qd), ref, 1e-2f, 2e-2f, name + (run > 0 ? " (early loads)" : ""));
    }
    if (::testing::Test::HasFailure()) return;
  }
}

struct PrefillChunk {
  int64_t start, n;  // positions [start, start + n) of the sequence, after `start` cached ones
};

// One chunk per sequence, all in one step: the tensor-core tiles, then the same tokens as rows.
inline void check_prefill_attention(const AttentionCache& c, const AttentionShape& s,
                                    const std::vector<PrefillChunk>& chunks, uint32_t seed, const std::string& what) {
  const int64_t D = s.head_dim, qd = s.num_heads * D, stride = qd + 2 * s.num_kv_heads * D;
  int64_t T = 0;
  for (auto& ch : chunks) T += ch.n;
  const Bf16Data q = random_bf16(T * stride, seed, -2.0f, 2.0f);
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
  auto d_tables = upload(c.tables);
  auto d_tiles = upload(tiles);
  auto d_rows = upload(rows);
  auto d_seq = upload(row_seq);
  auto d_ctx = upload(row_ctx);
  const std::string name = what + ", " + shape_name(s);
  {
    DeviceBuffer<uint16_t> d_out(T * qd);
    OPTIMATE_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, d_out.bytes()));
    PrefillAttentionParams p;
    p.q = bf16_ptr(d_q);
    p.q_row_stride = stride;
    p.cache = c.arena;
    p.tiles = d_tiles.get();
    p.block_tables = d_tables.get();
    p.max_blocks_per_seq = c.max_blocks;
    p.out = bf16_ptr(d_out);
    p.out_row_stride = qd;
    p.num_tiles = tiles.size() / 4;
    p.num_heads = s.num_heads;
    p.num_kv_heads = s.num_kv_heads;
    p.head_dim = D;
    p.block_size = c.block_size;
    p.scale = 1.0f / std::sqrt(float(D));
    prefill_attention(p, nullptr);
    expect_close(download_bf16(d_out.get(), T * qd), ref, 1.5e-2f, 2e-2f, "prefill (tensor cores), " + name);
  }
  {
    DeviceBuffer<uint16_t> d_out(T * qd);
    OPTIMATE_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, d_out.bytes()));
    PagedAttentionParams p = row_params(c, s, d_q.get(), stride, d_tables.get(), d_seq.get(), d_ctx.get(), T, d_out.get());
    p.rows = d_rows.get();
    paged_attention(p, nullptr);
    expect_close(download_bf16(d_out.get(), T * qd), ref, 1e-2f, 2e-2f, "prefill (row kernel), " + name);
  }
}

}  // namespace optimate::cuda::testing
