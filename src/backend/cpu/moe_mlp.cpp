#include "backend/cpu/moe_mlp.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/q8_kernels.h"
#include "core/error.h"

namespace optimate::cpu {
namespace {

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// Weight rows of one unit of work of the integer kernels: a whole cache line of y per row.
constexpr int64_t kUnitRows = 64;

// out = in w_e^T for every expert e with pairs, rows [offsets[e], offsets[e] + counts[e]) of in
// (cols wide) against `matrix(e)` ([out_cols, cols]), written to the same rows of out.
template <typename Matrix>
void project(const float* in, int64_t cols, const Matrix& matrix, int64_t num_experts, float* out,
             int64_t out_cols, const MoeContext& ctx, MoeScratch& s) {
  const ExpertGroups& g = s.groups;
  bool integer = true;
  for (int64_t e = 0; e < num_experts && integer; ++e) integer = g.counts[e] == 0 || !matrix(e).q8.empty();
  if (!integer) {
    for (int64_t e = 0; e < num_experts; ++e)
      if (g.counts[e] > 0) ctx.matmul(in + g.offsets[e] * cols, matrix(e), out + g.offsets[e] * out_cols, g.counts[e]);
    return;
  }
  // Quantized once for all experts; runs start on 8-row groups (group_by_expert's padding), so
  // a kernel's token group never straddles two experts' rows.
  const int64_t rows = g.offsets.back();
  resize_q8_activations(s.q8, rows, cols);
  ctx.pool->run((rows + kQ8Rows - 1) / kQ8Rows, [&](int64_t c, int) {
    quantize_activations(in, c * kQ8Rows, std::min(rows, (c + 1) * kQ8Rows), s.q8);
  });
  const int64_t chunks = (out_cols + kUnitRows - 1) / kUnitRows;
  std::vector<int64_t> active;
  for (int64_t e = 0; e < num_experts; ++e)
    if (g.counts[e] > 0) active.push_back(e);
  const Q8Kernel kernel = q8_kernel(ctx.isa);
  const int64_t group = q8_max_tokens(ctx.isa);
  ctx.pool->run(static_cast<int64_t>(active.size()) * chunks, [&](int64_t unit, int) {
    const int64_t e = active[unit / chunks];
    const int64_t r0 = unit % chunks * kUnitRows, n = std::min(kUnitRows, out_cols - r0);
    const int64_t begin = g.offsets[e], end = begin + g.counts[e];
    for (int64_t t0 = begin; t0 < end; t0 += group)
      kernel(matrix(e).q8, r0, n, s.q8, t0, std::min(group, end - t0), out + t0 * out_cols, out_cols, false);
  });
}

}  // namespace

void moe_mlp(const float* h, const CpuLayerWeights& w, const MoeConfig& moe, int64_t hidden, int64_t t,
             float* out, const MoeContext& ctx, MoeScratch& s) {
  const int64_t num_experts = moe.num_experts, k = moe.num_experts_per_tok, inter = moe.expert_intermediate_size;
  OPTIMATE_CHECK(static_cast<int64_t>(w.experts.size()) == num_experts && w.router.rows == num_experts,
                 "a layer of {} experts and {} router rows for a config of {}", w.experts.size(), w.router.rows,
                 num_experts);
  grow(s.router_logits, t * num_experts);
  grow(s.experts, t * k);
  grow(s.weights, t * k);
  ctx.matmul(h, w.router, s.router_logits.data(), t);
  route_tokens(s.router_logits.data(), t, num_experts, k, moe.norm_topk_prob, s.experts.data(), s.weights.data());
  group_by_expert(s.experts.data(), t, k, num_experts, kQ8Rows, s.groups);

  const int64_t rows = s.groups.offsets.back();
  grow(s.rows, rows * hidden);
  grow(s.gate_up, rows * 2 * inter);
  grow(s.act, rows * inter);
  grow(s.out, rows * hidden);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t pair = s.groups.pairs[r];
    float* dst = s.rows.data() + r * hidden;
    if (pair < 0) std::fill_n(dst, hidden, 0.0f);
    else std::copy_n(h + pair / k * hidden, hidden, dst);
  }
  project(s.rows.data(), hidden, [&](int64_t e) -> const CpuMatrix& { return w.experts[e].w_gate_up; },
          num_experts, s.gate_up.data(), 2 * inter, ctx, s);
  // Padding rows (and those of experts without pairs) hold whatever the buffer held: their
  // outputs are never read.
  silu_mul(s.gate_up.data(), s.act.data(), rows, inter, ctx.pool);
  project(s.act.data(), inter, [&](int64_t e) -> const CpuMatrix& { return w.experts[e].w_down; }, num_experts,
          s.out.data(), hidden, ctx, s);

  // Each token's experts in ascending order, as transformers adds them (index_add_ per expert).
  for (int64_t tok = 0; tok < t; ++tok) {
    int64_t slots[64];
    OPTIMATE_CHECK(k <= 64, "top-{} routing", k);
    for (int64_t j = 0; j < k; ++j) slots[j] = j;
    const int32_t* ids = s.experts.data() + tok * k;
    std::sort(slots, slots + k, [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
    float* o = out + tok * hidden;
    std::fill_n(o, hidden, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t slot = slots[j];
      const float weight = s.weights[tok * k + slot];
      const float* y = s.out.data() + s.groups.row_of[tok * k + slot] * hidden;
      for (int64_t i = 0; i < hidden; ++i) o[i] += y[i] * weight;
    }
  }
}

}  // namespace optimate::cpu
