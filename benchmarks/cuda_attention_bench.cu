// The attention kernels alone on the Llama-3-8B shape (32 query heads, 8 KV heads, head_dim
// 128, 16-token cache blocks), printed as JSON and one line per case:
// - decode: batches of rows at a context, each kernel (tensor cores, CUDA cores) with the
//   runner's split choice and in-launch combine; achieved KV bandwidth against the copy rate;
// - prefill: causal tiles of one long prompt and of many short ones; achieved TFLOP/s;
// - kv: long-context decode over caches of bf16, fp8, int8 and int4 blocks (and bf16 blocks in
//   a cache that may hold quantized ones, the kernels' branching variant), each kernel (the
//   head clusters at the size kAuto would take, or 1): time, the bytes of codes and scales
//   read, and their rate.
// Each case runs over `layers` distinct caches (a real step's layers; together well past L2)
// captured in one graph; figures are per layer, medians of graph replays.
//
// - small: batches of 1 to 16 rows at contexts 300 to 8192, the head-cluster kernel against
//   the split kernels at their best split count (over as many layers as keep K/V out of L2);
//
//   cuda_attention_bench [--out FILE.json] [--layers N] [--context N] [--batches 1,64,256,1024]
//                        [--kv-context N] [--kv-batches 8,64] [--kv-split-scales 1,2,4]
//                        [--small-batches 1,2,4,8,16] [--small-contexts 300,1024,4096,8192]
//                        [--only decode|small|prefill|kv] [--kv-precisions bf16,fp8,int8,int4]
// (--kv-split-scales: the kv cases again with the runner's split count times each factor; 0
// takes the count of a bf16-only cache, which a quantized one had before it got more splits)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/dummy_fill.h"
#include "backend/cuda/kernel_paths.h"
#include "backend/cuda/kv_cache_write.h"
#include "backend/cuda/paged_attention.h"
#include "backend/cuda/paged_attention_heads.h"
#include "backend/cuda/prefill_attention.h"
#include "cuda_bench_util.h"
#include "kv/kv_format.h"
#include "kv/kv_layout.h"

using namespace optimate;
using namespace optimate::cuda;

namespace {

constexpr int64_t kHeads = 32, kKvHeads = 8, kDim = 128, kBlock = 16;

// A paged cache for `layers` layers with shuffled block tables for `seqs` sequences of up to
// `max_len` tokens each, and query/output rows for `tokens` tokens.
struct Setup {
  int64_t layers, seqs, max_blocks, blocks_per_layer;
  DeviceBuffer<__nv_bfloat16> k, v, q, out;
  DeviceBuffer<int32_t> tables;
  Setup(int64_t layers_, int64_t seqs_, int64_t max_len, int64_t tokens)
      : layers(layers_), seqs(seqs_), max_blocks((max_len + kBlock - 1) / kBlock) {
    blocks_per_layer = seqs * max_blocks;
    const int64_t per_layer = blocks_per_layer * kKvHeads * kBlock * kDim;
    k.resize(layers * per_layer);
    v.resize(layers * per_layer);
    dummy_fill(k.get(), layers * per_layer, 7, 1, -1.0f, 1.0f);
    dummy_fill(v.get(), layers * per_layer, 7, 2, -1.0f, 1.0f);
    const int64_t qkv = (kHeads + 2 * kKvHeads) * kDim;
    q.resize(tokens * qkv);
    dummy_fill(q.get(), tokens * qkv, 7, 3, -2.0f, 2.0f);
    out.resize(tokens * kHeads * kDim);
    std::vector<int32_t> ids(blocks_per_layer);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
    tables.resize(ids.size());
    OPTIMATE_CUDA_CHECK(cudaMemcpy(tables.get(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  }
  int64_t layer_elems() const { return blocks_per_layer * kKvHeads * kBlock * kDim; }
  KvArena arena(int64_t layer) {
    return {reinterpret_cast<uint8_t*>(k.get() + layer * layer_elems()),
            reinterpret_cast<uint8_t*>(v.get() + layer * layer_elems()), kv_bf16_block_bytes(kKvHeads, kBlock, kDim),
            false};
  }
};

const char* kernel_name(DecodeAttentionKernel k) {
  return k == DecodeAttentionKernel::kTensorCores    ? "tensor_cores"
         : k == DecodeAttentionKernel::kHeadClusters ? "head_clusters"
                                                     : "cuda_cores";
}

template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& h) {
  DeviceBuffer<T> d(std::max<size_t>(1, h.size()));
  OPTIMATE_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Decode rows, one per sequence, q in fused QKV rows, combined in the launch as the runner does.
PagedAttentionParams decode_params(const __nv_bfloat16* q, const int32_t* row_seq, const int32_t* row_ctx,
                                   const int32_t* tables, int64_t max_blocks, __nv_bfloat16* out, float* workspace,
                                   int* counters, int64_t batch, int splits, DecodeAttentionKernel kernel) {
  PagedAttentionParams p;
  p.q = q;
  p.q_row_stride = (kHeads + 2 * kKvHeads) * kDim;
  p.row_seq = row_seq;
  p.row_ctx = row_ctx;
  p.block_tables = tables;
  p.max_blocks_per_seq = max_blocks;
  p.out = out;
  p.out_row_stride = kHeads * kDim;
  p.workspace = workspace;
  p.split_counters = counters;
  p.num_rows = batch;
  p.num_heads = kHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kDim;
  p.block_size = kBlock;
  p.num_splits = splits;
  p.scale = 1.0f / std::sqrt(float(kDim));
  p.kernel = kernel;
  return p;
}

// splits 0: the runner's choice for this batch and context.
nlohmann::json decode_case(int64_t batch, int64_t context, int64_t layers, DecodeAttentionKernel kernel,
                           int num_sms, double copy_gbs, cudaStream_t s, int splits = 0) {
  Setup st(layers, batch, context, batch);
  std::vector<int32_t> seq(batch), ctx(batch, static_cast<int32_t>(context));
  std::iota(seq.begin(), seq.end(), 0);
  auto d_seq = to_device(seq);
  auto d_ctx = to_device(ctx);
  const DecodeAttentionShape shape{kHeads, kKvHeads, kDim, kBlock, kernel};
  if (splits == 0) splits = paged_attention_num_splits(batch, shape, context, num_sms);
  DeviceBuffer<float> ws(std::max<int64_t>(1, paged_attention_workspace_floats(batch, kHeads, splits, kDim)));
  DeviceBuffer<int> counters(batch * kKvHeads);
  OPTIMATE_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  PagedAttentionParams p = decode_params(st.q.get(), d_seq.get(), d_ctx.get(), st.tables.get(), st.max_blocks,
                                         st.out.get(), ws.get(), counters.get(), batch, splits, kernel);
  cudaGraphExec_t g = bench::capture(s, [&] {
    for (int64_t l = 0; l < layers; ++l) {
      p.cache = st.arena(l);
      paged_attention(p, s);
    }
  });
  const double us = bench::replay_ms(g, s, 20) * 1e3 / layers;
  cudaGraphExecDestroy(g);
  const double bytes = 2.0 * batch * context * kKvHeads * kDim * 2;  // K and V, bf16
  const double gbs = bytes / (us * 1e-6) / 1e9;
  const bool tc = kernel == DecodeAttentionKernel::kTensorCores;
  const char* name = tc ? "tensor_cores" : "cuda_cores";
  // What the rows ran with: the tensor-core kernel caps a short row's splits (counters are set).
  const int used = tc ? paged_attention_tc_row_splits(splits, static_cast<int>(context)) : splits;
  std::printf("decode %-12s batch %5ld ctx %5ld splits %2d (used %2d): %9.1f us/layer %7.0f GB/s (%4.1f%% of copy)\n",
              name, long(batch), long(context), splits, used, us, gbs, 100.0 * gbs / copy_gbs);
  return {{"kernel", name}, {"batch", batch}, {"context", context}, {"splits", splits}, {"splits_used", used},
          {"us_per_layer", us}, {"kv_gb_per_s", gbs}, {"fraction_of_copy", gbs / copy_gbs}};
}

// Small batches, the head-cluster kernel against the split kernels: `batch` rows of `context`
// keys over enough layers' caches (at least 256 MB of K/V, 2 to 256 layers) that replays read
// them from memory, not L2. Each split kernel at every split count (best and runner's choice
// kept), the head-cluster kernel at every cluster size and as kAuto dispatches it.
nlohmann::json small_batch_case(int64_t batch, int64_t context, int num_sms, double copy_gbs, cudaStream_t s) {
  const double bytes = 2.0 * batch * context * kKvHeads * kDim * 2;  // K and V, bf16, per layer
  const int64_t layers = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(256e6 / bytes)), 2, 256);
  Setup st(layers, batch, context, batch);
  std::vector<int32_t> seq(batch), ctx(batch, static_cast<int32_t>(context));
  std::iota(seq.begin(), seq.end(), 0);
  auto d_seq = to_device(seq);
  auto d_ctx = to_device(ctx);
  DeviceBuffer<float> ws(std::max<int64_t>(1, paged_attention_workspace_floats(batch, kHeads, 64, kDim)));
  DeviceBuffer<int> counters(batch * kKvHeads);
  OPTIMATE_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  // us per layer of `launch(p)` over every layer, or -1 where it cannot launch (a cluster size
  // the device does not allow).
  auto time_us = [&](DecodeAttentionKernel kernel, int splits, const std::function<void(PagedAttentionParams&)>& launch) {
    PagedAttentionParams p = decode_params(st.q.get(), d_seq.get(), d_ctx.get(), st.tables.get(), st.max_blocks,
                                           st.out.get(), ws.get(), counters.get(), batch, splits, kernel);
    p.prior_keys_stable = true;  // as the runner launches decode rows
    p.cache = st.arena(0);
    try {
      launch(p);
      OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(s));
    } catch (const std::exception&) {
      cudaGetLastError();
      return -1.0;
    }
    cudaGraphExec_t g = bench::capture(s, [&] {
      for (int64_t l = 0; l < layers; ++l) {
        p.cache = st.arena(l);
        launch(p);
      }
    });
    const double us = bench::replay_ms(g, s, 20) * 1e3 / layers;
    cudaGraphExecDestroy(g);
    return us;
  };
  auto rate = [&](double us) { return bytes / (us * 1e-6) / 1e9; };
  nlohmann::json j{{"batch", batch}, {"context", context}, {"layers", layers}};
  const std::string head = "small batch " + std::to_string(batch) + " ctx " + std::to_string(context);
  double best_old = 1e30;
  int tc_runner = 1;
  for (auto kernel : {DecodeAttentionKernel::kTensorCores, DecodeAttentionKernel::kCudaCores}) {
    const bool tc = kernel == DecodeAttentionKernel::kTensorCores;
    const int runner = paged_attention_num_splits(batch, {kHeads, kKvHeads, kDim, kBlock, kernel}, context, num_sms);
    if (tc) tc_runner = runner;
    double best = 1e30, at_runner = 0;
    int best_splits = 0;
    for (int splits : {1, 2, 4, 8, 16, 32, 64, runner}) {
      if (splits > 1 && splits * 32 > context && splits != runner) continue;
      const double us = time_us(kernel, splits, [&](PagedAttentionParams& p) { paged_attention(p, s); });
      if (splits == runner) at_runner = us;
      if (us < best) best = us, best_splits = splits;
    }
    best_old = std::min(best_old, best);
    j[kernel_name(kernel)] = {{"best_us", best}, {"best_splits", best_splits}, {"runner_splits", runner},
                              {"runner_us", at_runner}, {"best_fraction_of_copy", rate(best) / copy_gbs}};
    std::printf("%s %-13s best %7.1f us/layer (splits %2d) %6.0f GB/s (%4.1f%% of copy); runner's %2d splits %7.1f us\n",
                head.c_str(), kernel_name(kernel), best, best_splits, rate(best), 100.0 * rate(best) / copy_gbs, runner,
                at_runner);
  }
  // kAuto as the runner launches it: the head clusters for few rows (the Hopper path), else the
  // tensor-core kernel with the runner's splits.
  const bool clusters = device_kernel_paths().head_clusters;
  const int auto_size = clusters ? paged_attention_head_cluster_size(batch, kKvHeads, num_sms) : 0;
  const double auto_us =
      time_us(DecodeAttentionKernel::kAuto, tc_runner, [&](PagedAttentionParams& p) { paged_attention(p, s); });
  std::printf("%s %-13s %7.1f us/layer (cluster %d) %6.0f GB/s (%4.1f%% of copy); best split kernel / auto %.2fx\n",
              head.c_str(), "auto", auto_us, auto_size, rate(auto_us), 100.0 * rate(auto_us) / copy_gbs,
              best_old / auto_us);
  j["auto"] = {{"cluster", auto_size}, {"us", auto_us}, {"kv_gb_per_s", rate(auto_us)},
               {"fraction_of_copy", rate(auto_us) / copy_gbs}, {"best_split_kernel_over_auto", best_old / auto_us}};
  for (int warps : {8, 4}) {
    if (!clusters) break;
    std::printf("%s head_clusters %d warps, us/layer per cluster size (resident clusters):", head.c_str(), warps);
    for (int cluster : {1, 2, 4, 8, 16}) {
      PagedAttentionParams shape = decode_params(st.q.get(), d_seq.get(), d_ctx.get(), st.tables.get(), st.max_blocks,
                                                 st.out.get(), ws.get(), counters.get(), batch, 1,
                                                 DecodeAttentionKernel::kHeadClusters);
      shape.cache = st.arena(0);
      const int resident = paged_attention_head_clusters_resident(shape, cluster, warps);
      const double us = time_us(DecodeAttentionKernel::kHeadClusters, 1,
                                [&](PagedAttentionParams& p) { paged_attention_head_clusters(p, cluster, s, warps); });
      std::printf("  %2d: %6.1f (%d)", cluster, us, resident);
      j["head_clusters"].push_back({{"cluster", cluster}, {"warps", warps}, {"resident_clusters", resident}, {"us", us},
                                    {"kv_gb_per_s", us > 0 ? rate(us) : 0.0},
                                    {"fraction_of_copy", us > 0 ? rate(us) / copy_gbs : 0.0}});
    }
    std::printf("\n");
  }
  std::fflush(stdout);
  return j;
}

// `seqs` prompts of `len` tokens each, all in one prefill step.
nlohmann::json prefill_case(int64_t seqs, int64_t len, int64_t layers, cudaStream_t s) {
  Setup st(layers, seqs, len, seqs * len);
  std::vector<int32_t> tiles;
  for (int64_t i = 0; i < seqs; ++i)
    for (int64_t j = 0; j < len; j += kPrefillTileRows)
      tiles.insert(tiles.end(), {int32_t(i * len + j), int32_t(std::min<int64_t>(kPrefillTileRows, len - j)),
                                 int32_t(j), int32_t(i)});
  auto d_tiles = to_device(tiles);
  PrefillAttentionParams p;
  p.q = st.q.get();
  p.q_row_stride = (kHeads + 2 * kKvHeads) * kDim;
  p.tiles = d_tiles.get();
  p.block_tables = st.tables.get();
  p.max_blocks_per_seq = st.max_blocks;
  p.out = st.out.get();
  p.out_row_stride = kHeads * kDim;
  p.num_tiles = static_cast<int64_t>(tiles.size() / 4);
  p.num_heads = kHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kDim;
  p.block_size = kBlock;
  p.scale = 1.0f / std::sqrt(float(kDim));
  cudaGraphExec_t g = bench::capture(s, [&] {
    for (int64_t l = 0; l < layers; ++l) {
      p.cache = st.arena(l);
      prefill_attention(p, s);
    }
  });
  const double us = bench::replay_ms(g, s, 10) * 1e3 / layers;
  cudaGraphExecDestroy(g);
  // Causal: query i attends to i + 1 keys; QK^T and PV, 2 FLOPs per multiply-add.
  const double flops = 4.0 * kHeads * kDim * seqs * (len * (len + 1) / 2.0);
  const double tflops = flops / (us * 1e-6) / 1e12;
  std::printf("prefill %ld x %ld: %9.1f us/layer %6.1f TFLOP/s\n", long(seqs), long(len), us, tflops);
  return {{"seqs", seqs}, {"len", len}, {"us_per_layer", us}, {"tflop_per_s", tflops}};
}

// `batch` rows of `context` keys over caches whose blocks are all `precision`; `dynamic`: in a
// layout that may also hold int8 blocks (so the kernels take their branching variant).
nlohmann::json kv_precision_case(int64_t batch, int64_t context, int64_t layers, kv::KvPrecision precision,
                                 bool dynamic, DecodeAttentionKernel kernel, int num_sms, double copy_gbs,
                                 cudaStream_t s, int split_scale = 1) {
  const kv::KvLayout layout = kv::plan_kv_layout(
      kv::KvPrecision::kBF16, precision, dynamic ? std::optional(kv::KvPrecision::kInt8) : std::nullopt, kKvHeads,
      kBlock, kDim);
  const int64_t max_blocks = (context + kBlock - 1) / kBlock, blocks = batch * max_blocks;
  const int64_t slots_per_block = layout.slots_for(precision), arena_bytes = blocks * slots_per_block * layout.slot_bytes;
  const int code = kv::precision_code(precision);
  DeviceBuffer<uint8_t> arenas(2 * layers * arena_bytes);
  auto arena = [&](int64_t l) {
    uint8_t* k = arenas.get() + 2 * l * arena_bytes;
    return KvArena{k, k + arena_bytes, layout.slot_bytes, dynamic || code != 0, dynamic || code == 0 ? -1 : code};
  };
  std::vector<int32_t> ids(blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
  std::vector<int32_t> tables(blocks);
  for (int64_t b = 0; b < blocks; ++b) tables[b] = kv::make_entry(code, static_cast<int32_t>(ids[b] * slots_per_block));
  // Every position written through the KV write kernel (so quantized with real scales), a
  // chunk of tokens at a time from one buffer of random rows.
  const int64_t chunk = 16384, row = kKvHeads * kDim;
  DeviceBuffer<__nv_bfloat16> src(chunk * row);
  dummy_fill(src.get(), chunk * row, 9, 4, -1.0f, 1.0f);
  std::vector<int32_t> targets;
  for (int64_t seq = 0; seq < batch; ++seq)
    for (int64_t pos = 0; pos < context; ++pos) {
      const int32_t e = tables[seq * max_blocks + pos / kBlock];
      targets.push_back(kv_write_target(code, kv::entry_slot(e), kBlock, static_cast<int>(pos % kBlock)));
    }
  auto d_targets = to_device(targets);
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t t = 0; t < static_cast<int64_t>(targets.size()); t += chunk)
      kv_cache_write(src.get(), src.get(), row, arena(l), d_targets.get() + t,
                     std::min<int64_t>(chunk, static_cast<int64_t>(targets.size()) - t), kKvHeads, kBlock, kDim, s);
  std::vector<int32_t> seq(batch), ctx(batch, static_cast<int32_t>(context));
  std::iota(seq.begin(), seq.end(), 0);
  auto d_seq = to_device(seq);
  auto d_ctx = to_device(ctx);
  auto d_tables = to_device(tables);
  const int64_t qkv = (kHeads + 2 * kKvHeads) * kDim;
  DeviceBuffer<__nv_bfloat16> q(batch * qkv), out(batch * kHeads * kDim);
  dummy_fill(q.get(), batch * qkv, 7, 3, -2.0f, 2.0f);
  // The runner's choice (more splits where the cache may hold quantized blocks) times the
  // scale; scale 0: the choice for a bf16-only cache.
  const DecodeAttentionShape shape{kHeads, kKvHeads, kDim, kBlock, kernel, split_scale != 0 && (dynamic || code != 0)};
  const int splits = static_cast<int>(std::min<int64_t>({int64_t{64}, (context + 31) / 32,
                                                         int64_t{std::max(1, split_scale)} * paged_attention_num_splits(batch, shape, context, num_sms)}));
  DeviceBuffer<float> ws(std::max<int64_t>(1, paged_attention_workspace_floats(batch, kHeads, splits, kDim)));
  DeviceBuffer<int> counters(batch * kKvHeads);
  OPTIMATE_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  PagedAttentionParams p = decode_params(q.get(), d_seq.get(), d_ctx.get(), d_tables.get(), max_blocks, out.get(),
                                         ws.get(), counters.get(), batch, splits, kernel);
  cudaGraphExec_t g = bench::capture(s, [&] {
    for (int64_t l = 0; l < layers; ++l) {
      p.cache = arena(l);
      paged_attention(p, s);
    }
  });
  const double us = bench::replay_ms(g, s, 20) * 1e3 / layers;
  cudaGraphExecDestroy(g);
  const kv::BlockLayout block(precision, kKvHeads, kBlock, kDim);
  const double bytes = 2.0 * batch * context * kKvHeads * static_cast<double>(block.row_bytes + block.scale_bytes);
  const double gbs = bytes / (us * 1e-6) / 1e9;
  const std::string name = std::string(kv::kv_precision_name(precision)) + (dynamic ? " (dynamic cache)" : "");
  const char* kname = kernel_name(kernel);
  std::printf("kv %-20s %-12s batch %4ld ctx %6ld splits %2d: %9.1f us/layer %8.1f MB read %7.0f GB/s (%4.1f%% of copy)\n",
              name.c_str(), kname, long(batch), long(context), splits, us, bytes / 1e6, gbs, 100.0 * gbs / copy_gbs);
  return {{"precision", kv::kv_precision_name(precision)}, {"dynamic_cache", dynamic}, {"kernel", kname},
          {"batch", batch}, {"context", context}, {"splits", splits}, {"us_per_layer", us},
          {"bytes_per_layer", bytes}, {"gb_per_s", gbs}, {"fraction_of_copy", gbs / copy_gbs}};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t layers = 8, context = 300, kv_context = 8192;
  std::vector<int64_t> batches = {1, 64, 256, 1024}, kv_batches = {8, 64}, kv_split_scales = {1};
  std::vector<int64_t> small_batches = {1, 2, 4, 8, 16}, small_contexts = {300, 1024, 4096, 8192};
  std::string out_path, only, kv_precision_list = "bf16,fp8,int8,int4";
  const bool flags_ok = bench::parse_flags(
      argc, argv,
      {{"--out", [&](const std::string& v) { out_path = v; }},
       {"--layers", [&](const std::string& v) { layers = std::stoll(v); }},
       {"--context", [&](const std::string& v) { context = std::stoll(v); }},
       {"--only", [&](const std::string& v) { only = v; }},
       {"--kv-precisions", [&](const std::string& v) { kv_precision_list = v; }},
       {"--kv-context", [&](const std::string& v) { kv_context = std::stoll(v); }},
       {"--kv-batches", [&](const std::string& v) { kv_batches = bench::parse_list(v); }},
       {"--kv-split-scales", [&](const std::string& v) { kv_split_scales = bench::parse_list(v); }},
       {"--small-batches", [&](const std::string& v) { small_batches = bench::parse_list(v); }},
       {"--small-contexts", [&](const std::string& v) { small_contexts = bench::parse_list(v); }},
       {"--batches", [&](const std::string& v) { batches = bench::parse_list(v); }}});
  if (!flags_ok) return 2;
  try {
    std::vector<kv::KvPrecision> kv_precisions;
    for (size_t at = 0; at < kv_precision_list.size();) {
      const size_t comma = std::min(kv_precision_list.find(',', at), kv_precision_list.size());
      const KvCacheDtype dtype = parse_choice<KvCacheDtype>(kv_precision_list.substr(at, comma - at), "--kv-precisions");
      kv_precisions.push_back(kv::kv_precision_for(dtype, kv::KvPrecision::kBF16));
      at = comma + 1;
    }
    cudaStream_t s;
    OPTIMATE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaDeviceProp prop{};
    OPTIMATE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    nlohmann::json j;
    j["device"] = prop.name;
    j["kernel_paths"] = device_kernel_paths().describe();
    j["copy_bandwidth_gb_per_s"] = bench::copy_bandwidth_gbs();
    std::printf("copy %.0f GB/s\n", j["copy_bandwidth_gb_per_s"].get<double>());
    if (only.empty() || only == "decode")
      for (int64_t b : batches)
        for (auto k : {DecodeAttentionKernel::kTensorCores, DecodeAttentionKernel::kCudaCores})
          j["decode"].push_back(decode_case(b, context, layers, k, prop.multiProcessorCount,
                                            j["copy_bandwidth_gb_per_s"], s));
    // One row: latency, not bandwidth; how the split count moves it.
    if (only.empty() || only == "decode")
      for (int splits : {1, 2, 4, 8, 16, 32})
        for (auto k : {DecodeAttentionKernel::kTensorCores, DecodeAttentionKernel::kCudaCores})
          j["decode_batch1_splits"].push_back(decode_case(1, context, layers, k, prop.multiProcessorCount,
                                                          j["copy_bandwidth_gb_per_s"], s, splits));
    if (only.empty() || only == "small")
      for (int64_t b : small_batches)
        for (int64_t c : small_contexts)
          j["small_batch"].push_back(small_batch_case(b, c, prop.multiProcessorCount, j["copy_bandwidth_gb_per_s"], s));
    if (only.empty() || only == "prefill") {
      j["prefill"].push_back(prefill_case(1, 2048, layers, s));
      j["prefill"].push_back(prefill_case(32, 256, layers, s));
      j["prefill"].push_back(prefill_case(16, 200, layers, s));
    }
    if (only.empty() || only == "kv")
      for (int64_t scale : kv_split_scales)
        for (int64_t b : kv_batches)
          for (auto k : {DecodeAttentionKernel::kTensorCores, DecodeAttentionKernel::kCudaCores,
                         DecodeAttentionKernel::kHeadClusters}) {
            if (k == DecodeAttentionKernel::kHeadClusters && !device_kernel_paths().head_clusters) continue;
            for (auto precision : kv_precisions)
              j["kv"].push_back(kv_precision_case(b, kv_context, layers, precision, false, k,
                                                  prop.multiProcessorCount, j["copy_bandwidth_gb_per_s"], s,
                                                  static_cast<int>(scale)));
            if (std::count(kv_precisions.begin(), kv_precisions.end(), kv::KvPrecision::kBF16))
              j["kv"].push_back(kv_precision_case(b, kv_context, layers, kv::KvPrecision::kBF16, true, k,
                                                  prop.multiProcessorCount, j["copy_bandwidth_gb_per_s"], s,
                                                  static_cast<int>(scale)));
          }
    bench::write_json(out_path, j);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
