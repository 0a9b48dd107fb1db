// FlashInfer's attention against the project's kernels on the same paged bf16 KV cache (the
// project's layout read as is, through the block-table adapter of flashinfer_paged.h), Llama-3-8B
// shape (32 query heads, 8 KV heads, head dim 128, 16-token blocks, shuffled block tables), 8
// layers of distinct caches per CUDA graph, medians of replays:
// - prefill: causal chunks of fresh prompts (1 x 2048, 32 x 256, 16 x 200) and chunks after a
//   cached prefix (chunked prefill: 1 x 512 after 1536 tokens, 8 x 256 after 768), TFLOP/s;
// - decode: one row per sequence at contexts 300 and 2048, batches 1 to 1024, the project's
//   split-K decode kernel (the runner's kernel and split choice) against FlashInfer's tensor-core
//   path, GB/s of K and V read;
// and, per case, the largest difference between the two outputs against the largest output, so
// a figure is never from a kernel that computed something else.
//
//   cuda_flashinfer_bench [--out FILE.json] [--layers N]
#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../cuda_bench_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/dummy_fill.h"
#include "backend/cuda/paged_attention.h"
#include "backend/cuda/prefill_attention.h"
#include "core/half.h"
#include "flashinfer_paged.h"
#ifdef OPTIMATE_FLASHINFER_SM90
#include "sm90/flashinfer_sm90.h"
#endif

using namespace optimate;
using namespace optimate::cuda;

namespace {

constexpr int64_t kHeads = 32, kKvHeads = 8, kDim = 128, kBlock = 16;
constexpr int64_t kQkvStride = (kHeads + 2 * kKvHeads) * kDim;

// One step: sequence i has qo[i] query rows, its last ones, over kv[i] keys.
struct Step {
  std::vector<int64_t> qo, kv;
  int64_t rows() const { return std::accumulate(qo.begin(), qo.end(), int64_t{0}); }
  int64_t max_kv() const { return *std::max_element(kv.begin(), kv.end()); }
  // Causal: query at position p attends to p + 1 keys; QK^T and PV, 2 FLOPs per multiply-add.
  double flops() const {
    double f = 0;
    for (size_t i = 0; i < qo.size(); ++i)
      for (int64_t r = 0; r < qo[i]; ++r) f += static_cast<double>(kv[i] - qo[i] + r + 1);
    return 4.0 * kHeads * kDim * f;
  }
  double kv_bytes() const {
    return 2.0 * kKvHeads * kDim * 2 * static_cast<double>(std::accumulate(kv.begin(), kv.end(), int64_t{0}));
  }
};

// Caches of `layers` layers (K and V arenas each [slot][kv_heads][block][dim]), shuffled tables.
struct Cache {
  int64_t layers, max_blocks, slots;
  DeviceBuffer<__nv_bfloat16> k, v, q, ours, theirs;
  std::vector<int32_t> table;
  DeviceBuffer<int32_t> d_table;
  Cache(int64_t layers_, const Step& step) : layers(layers_) {
    max_blocks = (step.max_kv() + kBlock - 1) / kBlock;
    slots = static_cast<int64_t>(step.kv.size()) * max_blocks;
    const int64_t per_layer = slots * kKvHeads * kBlock * kDim;
    k.resize(layers * per_layer);
    v.resize(layers * per_layer);
    dummy_fill(k.get(), layers * per_layer, 7, 1, -1.0f, 1.0f);
    dummy_fill(v.get(), layers * per_layer, 7, 2, -1.0f, 1.0f);
    q.resize(step.rows() * kQkvStride);
    dummy_fill(q.get(), step.rows() * kQkvStride, 7, 3, -2.0f, 2.0f);
    ours.resize(step.rows() * kHeads * kDim);
    theirs.resize(step.rows() * kHeads * kDim);
    table.resize(slots);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(5));
    d_table.resize(table.size());
    OPTIMATE_CUDA_CHECK(cudaMemcpy(d_table.get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  }
  const __nv_bfloat16* k_layer(int64_t l) const { return k.get() + l * slots * kKvHeads * kBlock * kDim; }
  const __nv_bfloat16* v_layer(int64_t l) const { return v.get() + l * slots * kKvHeads * kBlock * kDim; }
  KvArena arena(int64_t l) const {
    return {reinterpret_cast<uint8_t*>(const_cast<__nv_bfloat16*>(k_layer(l))),
            reinterpret_cast<uint8_t*>(const_cast<__nv_bfloat16*>(v_layer(l))),
            kv_bf16_block_bytes(kKvHeads, kBlock, kDim), false};
  }
};

template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& h) {
  DeviceBuffer<T> d(std::max<size_t>(1, h.size()));
  OPTIMATE_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Fills `theirs` with NaN before a kernel under test writes it, so a row it skips shows.
void poison(Cache& c) { OPTIMATE_CUDA_CHECK(cudaMemset(c.theirs.get(), 0xFF, c.theirs.bytes())); }

// max |ours - theirs| / max |ours| over the outputs of the last layer run.
double relative_difference(const Cache& c, int64_t n) {
  std::vector<uint16_t> a(n), b(n);
  OPTIMATE_CUDA_CHECK(cudaMemcpy(a.data(), c.ours.get(), n * 2, cudaMemcpyDeviceToHost));
  OPTIMATE_CUDA_CHECK(cudaMemcpy(b.data(), c.theirs.get(), n * 2, cudaMemcpyDeviceToHost));
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    const double x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]);
    // An output the kernel left unwritten (the NaN fill) or wrote as NaN is an infinite difference.
    diff = std::isfinite(y) ? std::max(diff, std::abs(x - y)) : INFINITY;
    scale = std::max(scale, std::abs(x));
  }
  return diff / scale;
}

bench::FlashInferBatch flashinfer_batch(const Step& step, const Cache& c) {
  bench::FlashInferBatch b;
  b.qo_indptr.push_back(0);
  for (size_t i = 0; i < step.qo.size(); ++i) {
    b.qo_indptr.push_back(b.qo_indptr.back() + static_cast<int32_t>(step.qo[i]));
    b.kv_len.push_back(static_cast<int32_t>(step.kv[i]));
  }
  b.table = c.table;
  b.max_pages = c.max_blocks;
  return b;
}

double time_layers(cudaStream_t s, int64_t layers, const std::function<void(int64_t)>& layer) {
  layer(0);  // eagerly first: a kernel's one-time attribute calls stay out of the capture
  OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraphExec_t g = bench::capture(s, [&] {
    for (int64_t l = 0; l < layers; ++l) layer(l);
  });
  const double us = bench::replay_ms(g, s, 10) * 1e3 / static_cast<double>(layers);
  cudaGraphExecDestroy(g);
  return us;
}

nlohmann::json prefill_case(const std::string& name, const Step& step, int64_t layers, [[maybe_unused]] bool hopper,
                            cudaStream_t s) {
  Cache c(layers, step);
  std::vector<int32_t> tiles;  // {first row, rows, first position, table row}
  int64_t row = 0;
  for (size_t i = 0; i < step.qo.size(); ++i) {
    const int64_t pos0 = step.kv[i] - step.qo[i];
    for (int64_t j = 0; j < step.qo[i]; j += kPrefillTileRows)
      tiles.insert(tiles.end(), {int32_t(row + j), int32_t(std::min<int64_t>(kPrefillTileRows, step.qo[i] - j)),
                                 int32_t(pos0 + j), int32_t(i)});
    row += step.qo[i];
  }
  auto d_tiles = to_device(tiles);
  PrefillAttentionParams p;
  p.q = c.q.get();
  p.q_row_stride = kQkvStride;
  p.tiles = d_tiles.get();
  p.block_tables = c.d_table.get();
  p.max_blocks_per_seq = c.max_blocks;
  p.out = c.ours.get();
  p.out_row_stride = kHeads * kDim;
  p.num_tiles = static_cast<int64_t>(tiles.size() / 4);
  p.num_heads = kHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kDim;
  p.block_size = kBlock;
  p.scale = 1.0f / std::sqrt(float(kDim));
  const double ours_us = time_layers(s, layers, [&](int64_t l) {
    p.cache = c.arena(l);
    prefill_attention(p, s);
  });
  bench::FlashInferPrefill fi({kHeads, kKvHeads, kDim, kBlock, kQkvStride}, flashinfer_batch(step, c), s);
  poison(c);
  const double fi_us = time_layers(s, layers, [&](int64_t l) { fi.run(c.q.get(), c.k_layer(l), c.v_layer(l), c.theirs.get(), s); });
  OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(s));
  const double diff = relative_difference(c, step.rows() * kHeads * kDim);
  const double tf_ours = step.flops() / (ours_us * 1e-6) / 1e12, tf_fi = step.flops() / (fi_us * 1e-6) / 1e12;
  std::printf("prefill %-22s ours %8.1f us/layer %6.1f TFLOP/s | flashinfer %8.1f us %6.1f TFLOP/s (tile %ld%s) "
              "| max diff %.2e\n",
              name.c_str(), ours_us, tf_ours, fi_us, tf_fi, long(fi.cta_tile_q()), fi.split_kv() ? ", split kv" : "",
              diff);
  nlohmann::json j = {{"case", name},           {"ours_us_per_layer", ours_us}, {"ours_tflop_per_s", tf_ours},
                      {"flashinfer_us_per_layer", fi_us}, {"flashinfer_tflop_per_s", tf_fi},
                      {"flashinfer_cta_tile_q", fi.cta_tile_q()}, {"relative_max_diff", diff}};
#ifdef OPTIMATE_FLASHINFER_SM90
  if (hopper) {  // its FlashAttention-3 kernels on the same caches, against ours again
    bench::FlashInferPrefillSm90 fa3({kHeads, kKvHeads, kDim, kBlock, kQkvStride}, flashinfer_batch(step, c), s);
    poison(c);
    const double fa3_us =
        time_layers(s, layers, [&](int64_t l) { fa3.run(c.q.get(), c.k_layer(l), c.v_layer(l), c.theirs.get(), s); });
    OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(s));
    const double fa3_diff = relative_difference(c, step.rows() * kHeads * kDim);
    const double tf_fa3 = step.flops() / (fa3_us * 1e-6) / 1e12;
    std::printf("prefill %-22s flashinfer sm90 (FA3) %8.1f us %6.1f TFLOP/s | max diff %.2e\n", name.c_str(), fa3_us,
                tf_fa3, fa3_diff);
    j["flashinfer_sm90_us_per_layer"] = fa3_us;
    j["flashinfer_sm90_tflop_per_s"] = tf_fa3;
    j["flashinfer_sm90_relative_max_diff"] = fa3_diff;
  }
#endif
  std::fflush(stdout);
  return j;
}

nlohmann::json decode_case(int64_t batch, int64_t context, int64_t layers, int num_sms, double copy_gbs, cudaStream_t s) {
  Step step;
  step.qo.assign(batch, 1);
  step.kv.assign(batch, context);
  Cache c(layers, step);
  std::vector<int32_t> seq(batch), ctx(batch, static_cast<int32_t>(context));
  std::iota(seq.begin(), seq.end(), 0);
  auto d_seq = to_device(seq);
  auto d_ctx = to_device(ctx);
  const DecodeAttentionShape shape{kHeads, kKvHeads, kDim, kBlock, DecodeAttentionKernel::kAuto};
  const int splits = paged_attention_num_splits(batch, shape, context, num_sms);
  DeviceBuffer<float> ws(std::max<int64_t>(1, paged_attention_workspace_floats(batch, kHeads, splits, kDim)));
  DeviceBuffer<int> counters(batch * kKvHeads);
  OPTIMATE_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  PagedAttentionParams p;
  p.q = c.q.get();
  p.q_row_stride = kQkvStride;
  p.row_seq = d_seq.get();
  p.row_ctx = d_ctx.get();
  p.block_tables = c.d_table.get();
  p.max_blocks_per_seq = c.max_blocks;
  p.out = c.ours.get();
  p.out_row_stride = kHeads * kDim;
  p.workspace = ws.get();
  p.split_counters = counters.get();
  p.num_rows = batch;
  p.num_heads = kHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kDim;
  p.block_size = kBlock;
  p.num_splits = splits;
  p.scale = 1.0f / std::sqrt(float(kDim));
  p.kernel = DecodeAttentionKernel::kAuto;
  const double ours_us = time_layers(s, layers, [&](int64_t l) {
    p.cache = c.arena(l);
    paged_attention(p, s);
  });
  bench::FlashInferPrefill fi({kHeads, kKvHeads, kDim, kBlock, kQkvStride}, flashinfer_batch(step, c), s);
  poison(c);
  const double fi_us = time_layers(s, layers, [&](int64_t l) { fi.run(c.q.get(), c.k_layer(l), c.v_layer(l), c.theirs.get(), s); });
  OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(s));
  const double diff = relative_difference(c, batch * kHeads * kDim);
  const double gb_ours = step.kv_bytes() / (ours_us * 1e-6) / 1e9, gb_fi = step.kv_bytes() / (fi_us * 1e-6) / 1e9;
  std::printf("decode batch %5ld ctx %5ld  ours %8.1f us/layer %6.0f GB/s (%4.1f%%) | flashinfer %8.1f us %6.0f GB/s "
              "(%4.1f%%, tile %ld%s) | max diff %.2e\n",
              long(batch), long(context), ours_us, gb_ours, 100 * gb_ours / copy_gbs, fi_us, gb_fi, 100 * gb_fi / copy_gbs,
              long(fi.cta_tile_q()), fi.split_kv() ? ", split kv" : "", diff);
  std::fflush(stdout);
  return {{"batch", batch},       {"context", context},           {"ours_us_per_layer", ours_us},
          {"ours_kv_gb_per_s", gb_ours}, {"flashinfer_us_per_layer", fi_us}, {"flashinfer_kv_gb_per_s", gb_fi},
          {"relative_max_diff", diff}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  int64_t layers = 8;
  if (!bench::parse_flags(argc, argv, {{"--out", [&](const std::string& v) { out_path = v; }},
                                       {"--layers", [&](const std::string& v) { layers = std::stoll(v); }}}))
    return 2;
  try {
    cudaStream_t s = nullptr;
    OPTIMATE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int sms = 0;
    OPTIMATE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int major = 0;
    OPTIMATE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    const bool hopper = major == 9;  // FlashInfer's SM90 kernels, where built, run on sm_90 only
    const double copy_gbs = bench::copy_bandwidth_gbs();
    nlohmann::json j;
    j["copy_bandwidth_gb_per_s"] = copy_gbs;
    auto fresh = [](int64_t seqs, int64_t len) { return Step{std::vector<int64_t>(seqs, len), std::vector<int64_t>(seqs, len)}; };
    auto after = [](int64_t seqs, int64_t chunk, int64_t prefix) {
      return Step{std::vector<int64_t>(seqs, chunk), std::vector<int64_t>(seqs, prefix + chunk)};
    };
    j["prefill"].push_back(prefill_case("1 x 2048", fresh(1, 2048), layers, hopper, s));
    j["prefill"].push_back(prefill_case("32 x 256", fresh(32, 256), layers, hopper, s));
    j["prefill"].push_back(prefill_case("16 x 200", fresh(16, 200), layers, hopper, s));
    j["prefill"].push_back(prefill_case("1 x 512 after 1536", after(1, 512, 1536), layers, hopper, s));
    j["prefill"].push_back(prefill_case("8 x 256 after 768", after(8, 256, 768), layers, hopper, s));
    for (int64_t ctx : {int64_t{300}, int64_t{2048}})
      for (int64_t b : {int64_t{1}, int64_t{64}, int64_t{256}, int64_t{1024}})
        j["decode"].push_back(decode_case(b, ctx, layers, sms, copy_gbs, s));
    bench::write_json(out_path, j);
    cudaStreamDestroy(s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_flashinfer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
