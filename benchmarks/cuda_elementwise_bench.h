// The GEMM path's elementwise kernels, the current generation against the baseline
// (elementwise_kernels.h), for cuda_decode_bench --elementwise 1: each kernel alone at 2048 and
// 8192 rows of the Llama-3-8B shape (µs, GB/s of the bytes the fused kernel must move, share of
// the copy rate), then the per-stage breakdown of a 1 x 2048 and a 32 x 256 prefill with bf16
// and with FP8 weights, both kernel sets in turn on the same runner.
//
// Bytes per call (rows r, hidden H, q/kv widths Q/K, intermediate I): RMSNorm reads the branch
// (2rH) and the fp32 residual (4rH), writes the residual back (4rH) and its output (2rH bf16, or
// rH codes + 4r scales); RoPE + KV write reads and writes q and k (4r(Q + K)), reads v (2rK) and
// writes k and v into the cache (bf16: 4rK; fp8: 2rK + scales); SiLU*mul reads 4rI and writes
// 2rI (or rI + 4r). The baseline moves more (a second pass, a separate FP8 rounding), so its
// GB/s is the same bytes over its longer time: the rate it would need to match.
#pragma once

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/activation.h"
#include "backend/cuda/cuda_model_runner.h"
#include "backend/cuda/dummy_fill.h"
#include "backend/cuda/fp8_quantize.h"
#include "backend/cuda/kv_block.h"
#include "backend/cuda/kv_cache_write.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/rope_kv_write.h"
#include "cuda_bench_util.h"
#include "cuda_breakdown_bench.h"
#include "cuda_decode_workload.h"

namespace optimate::cuda::bench {

// Old and new of one kernel, timed in alternation (three rounds of `reps`, the median round),
// each call on the next of `copies` buffer sets so a call does not find the last one's bytes in
// L2. fn(copy, baseline) enqueues one call.
inline nlohmann::json ab_entry(const char* kernel, int64_t rows, double bytes, double copy_gbs, int copies,
                               const std::function<void(int, bool)>& fn) {
  std::vector<double> old_ms, new_ms;
  int i = 0;
  for (int round = 0; round < 3; ++round)
    for (bool baseline : {true, false}) {
      const double ms = time_events_ms([&](int) { fn(i++ % copies, baseline); }, 10, 2);
      (baseline ? old_ms : new_ms).push_back(ms);
    }
  const double o = median(old_ms), n = median(new_ms);
  auto gbs = [&](double ms) { return bytes / (ms * 1e-3) / 1e9; };
  std::fprintf(stderr, "%-24s rows %5lld  old %8.1f us %6.0f GB/s (%3.0f%%)  new %8.1f us %6.0f GB/s (%3.0f%%)  x%.2f\n",
               kernel, static_cast<long long>(rows), o * 1e3, gbs(o), 100 * gbs(o) / copy_gbs, n * 1e3, gbs(n),
               100 * gbs(n) / copy_gbs, o / n);
  return {{"kernel", kernel},       {"rows", rows},
          {"bytes", bytes},         {"old_us", o * 1e3},
          {"new_us", n * 1e3},      {"old_gb_per_s", gbs(o)},
          {"new_gb_per_s", gbs(n)}, {"old_fraction_of_copy", gbs(o) / copy_gbs},
          {"new_fraction_of_copy", gbs(n) / copy_gbs}, {"speedup", o / n}};
}

// Buffer sets that together pass ~3x the H200's 50 MB L2.
inline int copies_for(double bytes) { return static_cast<int>(std::clamp(150e6 / bytes + 1.0, 1.0, 8.0)); }

inline nlohmann::json elementwise_kernel_sweep(const ModelConfig& c, double copy_gbs) {
  nlohmann::json out = nlohmann::json::array();
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, bs = 16;
  const int64_t Q = c.num_heads * D, K = c.num_kv_heads * D, qkv_dim = Q + 2 * K;
  const float eps = c.rms_norm_eps;
  DeviceBuffer<float> inv_freq(D / 2);
  {
    const std::vector<float> f = rope_inv_freq(c);
    OPTIMATE_CUDA_CHECK(cudaMemcpy(inv_freq.get(), f.data(), f.size() * 4, cudaMemcpyHostToDevice));
  }
  for (int64_t rows : {int64_t{2048}, int64_t{8192}}) {
    // RMSNorm + residual, bf16 and FP8 outputs.
    {
      const double bf16_bytes = rows * H * 12.0 + 2.0 * H, fp8_bytes = rows * (H * 11.0 + 4.0) + 2.0 * H;
      const int copies = copies_for(bf16_bytes);
      DeviceBuffer<__nv_bfloat16> x(copies * rows * H), w(H), y(rows * H);
      DeviceBuffer<float> res(copies * rows * H), scales(rows);
      DeviceBuffer<uint8_t> codes(rows * H);
      dummy_fill(x.get(), x.size(), 1, 0, -1.0f, 1.0f);
      dummy_fill(w.get(), w.size(), 1, 1, 0.5f, 1.5f);
      OPTIMATE_CUDA_CHECK(cudaMemset(res.get(), 0, res.bytes()));
      const Fp8Activations act{reinterpret_cast<__nv_fp8_e4m3*>(codes.get()), scales.get()};
      out.push_back(ab_entry("rmsnorm_residual", rows, bf16_bytes, copy_gbs, copies, [&](int i, bool baseline) {
        rmsnorm_residual(x.get() + i * rows * H, res.get() + i * rows * H, w.get(), y.get(), nullptr, rows, H, eps,
                         nullptr, baseline ? ElementwiseKernels::kBaseline : ElementwiseKernels::kCurrent);
      }));
      out.push_back(ab_entry("rmsnorm_residual_fp8", rows, fp8_bytes, copy_gbs, copies, [&](int i, bool baseline) {
        if (!baseline) {
          rmsnorm_residual_fp8(x.get() + i * rows * H, res.get() + i * rows * H, w.get(), act, rows, H, eps, nullptr);
          return;
        }
        rmsnorm_residual(x.get() + i * rows * H, res.get() + i * rows * H, w.get(), y.get(), nullptr, rows, H, eps,
                         nullptr, ElementwiseKernels::kBaseline);
        quantize_fp8_rows(y.get(), rows, H, act.codes, act.scales, nullptr);
      }));
    }
    // RoPE + KV write into a bf16 cache and into an fp8 one (every block fp8, scales after the
    // codes as kv_block.h lays them out).
    {
      const int copies = copies_for(rows * qkv_dim * 2.0);
      DeviceBuffer<__nv_bfloat16> qkv(copies * rows * qkv_dim);
      dummy_fill(qkv.get(), qkv.size(), 1, 2, -1.0f, 1.0f);
      std::vector<int32_t> host_pos(rows), host_bf16(rows), host_fp8(rows);
      for (int64_t t = 0; t < rows; ++t) {
        host_pos[t] = static_cast<int32_t>(t % 4096);
        host_bf16[t] = static_cast<int32_t>(t);
        host_fp8[t] = kv_write_target(kKvFp8, static_cast<int32_t>(t / bs), static_cast<int>(bs), static_cast<int>(t % bs));
      }
      auto to_device = [](const std::vector<int32_t>& v) {
        DeviceBuffer<int32_t> d(v.size());
        OPTIMATE_CUDA_CHECK(cudaMemcpy(d.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
        return d;
      };
      DeviceBuffer<int32_t> pos = to_device(host_pos), slots_bf16 = to_device(host_bf16), slots_fp8 = to_device(host_fp8);
      const int64_t blocks = rows / bs;
      const int64_t bf16_slot = kv_bf16_block_bytes(c.num_kv_heads, bs, D);
      const int64_t fp8_slot = (c.num_kv_heads * bs * (D + 4) + 15) / 16 * 16;
      DeviceBuffer<uint8_t> k_cache(blocks * bf16_slot), v_cache(blocks * bf16_slot);
      const KvArena bf16_arena{k_cache.get(), v_cache.get(), bf16_slot, false};
      const KvArena fp8_arena{k_cache.get(), v_cache.get(), fp8_slot, true, kKvFp8};
      for (bool fp8 : {false, true}) {
        const double bytes = rows * (4.0 * (Q + K) + 2.0 * K) + (fp8 ? rows * (2.0 * K + 8.0 * c.num_kv_heads) : rows * 4.0 * K);
        const KvArena& arena = fp8 ? fp8_arena : bf16_arena;
        const int32_t* slots = fp8 ? slots_fp8.get() : slots_bf16.get();
        out.push_back(ab_entry(fp8 ? "rope_kv_write_fp8_cache" : "rope_kv_write", rows, bytes, copy_gbs, copies,
                               [&](int i, bool baseline) {
          __nv_bfloat16* q = qkv.get() + i * rows * qkv_dim;
          if (!baseline) {
            rope_kv_write(q, qkv_dim, pos.get(), inv_freq.get(), arena, slots, rows, c.num_heads, c.num_kv_heads, bs, D,
                          nullptr);
            return;
          }
          rope_inplace(q, qkv_dim, pos.get(), inv_freq.get(), rows, c.num_heads, c.num_kv_heads, D, nullptr);
          kv_cache_write(q + Q, q + Q + K, qkv_dim, arena, slots, rows, c.num_kv_heads, bs, D, nullptr);
        }));
      }
    }
    // SiLU*mul, bf16 and FP8 outputs.
    {
      const double bf16_bytes = rows * I * 6.0, fp8_bytes = rows * (I * 5.0 + 4.0);
      const int copies = copies_for(rows * I * 4.0);
      DeviceBuffer<__nv_bfloat16> gate_up(copies * rows * 2 * I), act(rows * I);
      DeviceBuffer<uint8_t> codes(rows * I);
      DeviceBuffer<float> scales(rows);
      dummy_fill(gate_up.get(), gate_up.size(), 1, 3, -4.0f, 4.0f);
      const Fp8Activations fp8_act{reinterpret_cast<__nv_fp8_e4m3*>(codes.get()), scales.get()};
      out.push_back(ab_entry("silu_mul", rows, bf16_bytes, copy_gbs, copies, [&](int i, bool baseline) {
        silu_mul(gate_up.get() + i * rows * 2 * I, act.get(), rows, I, nullptr,
                 baseline ? ElementwiseKernels::kBaseline : ElementwiseKernels::kCurrent);
      }));
      out.push_back(ab_entry("silu_mul_fp8", rows, fp8_bytes, copy_gbs, copies, [&](int i, bool baseline) {
        if (!baseline) {
          silu_mul_fp8(gate_up.get() + i * rows * 2 * I, fp8_act, rows, I, nullptr);
          return;
        }
        silu_mul(gate_up.get() + i * rows * 2 * I, act.get(), rows, I, nullptr, ElementwiseKernels::kBaseline);
        quantize_fp8_rows(act.get(), rows, I, fp8_act.codes, fp8_act.scales, nullptr);
      }));
    }
  }
  return out;
}

// Per-stage breakdown and wall time of a 1 x prefill_len and a 32 x (prefill_len / 8) prefill,
// baseline and current kernels alternating on one runner (bf16 or FP8 weights).
inline nlohmann::json elementwise_prefill_ab(const ModelConfig& c, WeightQuantization quantization, int64_t prefill_len,
                                             double copy_gbs, double gemm_tflops) {
  CudaRunnerOptions o;
  o.quantization = quantization;
  o.max_num_seqs = 64;
  o.max_num_batched_tokens = 8192;
  o.max_model_len = 4096;
  CudaModelRunner runner(make_dummy_weights(c, 0), o);
  const int64_t bs = runner.kv_shape().block_size;
  Seqs one = make_seqs(1, prefill_len, prefill_len, bs, c.vocab_size);
  Seqs many = make_seqs(32, prefill_len / 8, prefill_len / 8, bs, c.vocab_size);
  ForwardBatch one_b{{SeqSlice{one.tokens[0], 0, one.tables[0], true}}}, many_b;
  for (int64_t i = 0; i < 32; ++i) many_b.seqs.push_back({many.tokens[i], 0, many.tables[i], true});
  nlohmann::json out;
  std::vector<float> logits;
  struct Step { std::string name; const ForwardBatch* batch; double tokens, logits_rows; };
  for (const Step& st : {Step{"prefill_1x" + std::to_string(prefill_len), &one_b, double(prefill_len), 1.0},
                         Step{"prefill_32x" + std::to_string(prefill_len / 8), &many_b, double(prefill_len * 4), 32.0}}) {
    std::vector<double> wall[2];
    for (int round = 0; round < 2; ++round)
      for (bool fused : {false, true}) {
        runner.set_fused_elementwise(fused);
        runner.forward(*st.batch, logits);  // warm-up after the switch
        // The breakdown of the last round is kept; wall times (no events) come from every round.
        out[st.name][fused ? "current" : "baseline"]["breakdown"] = stage_breakdown(
            runner, c, [&] { runner.forward(*st.batch, logits); }, 3, st.tokens, st.logits_rows, copy_gbs, gemm_tflops);
        for (int rep = 0; rep < 3; ++rep) {
          const auto t0 = Clock::now();
          runner.forward(*st.batch, logits);
          wall[fused].push_back(seconds_since(t0) * 1e3);
        }
      }
    for (bool fused : {false, true}) {
      nlohmann::json& e = out[st.name][fused ? "current" : "baseline"];
      e["wall_ms"] = median(wall[fused]);
      double elementwise_ms = 0;
      for (const auto& stage : e["breakdown"]["stages"])
        if (stage["stage"] == "norm_rope_kv_act") elementwise_ms = stage["ms_per_step"].get<double>();
      std::fprintf(stderr, "%s %s %-9s wall %7.2f ms  eager %7.2f ms  elementwise stage %6.2f ms\n",
                   choice_name(quantization).data(), st.name.c_str(), fused ? "current" : "baseline",
                   e["wall_ms"].get<double>(), e["breakdown"]["ms_per_step"].get<double>(), elementwise_ms);
    }
  }
  runner.set_fused_elementwise(true);
  return out;
}

}  // namespace optimate::cuda::bench
