// The MLP of a mixture-of-experts layer on the CPU: the router in fp32, the routing of
// model/moe_routing.h, then for each expert that received tokens (and only those) its SwiGLU MLP
// over its tokens' rows, through the same kernels as a dense layer's, and the weighted sum.
//
// Rows are grouped by expert (each expert's run padded to the 8-row groups of the 8-bit
// activations). Where every expert's matrices are repacked for the integer kernels (q8_linear.h)
// the inputs of a projection are quantized once for all experts and the pool's threads share
// units of (expert, 64 weight rows), so a decode step's few active experts keep every thread
// busy; otherwise each active expert's product goes through the runner's own linear.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_thread_pool.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/q8_activations.h"
#include "model/moe_routing.h"

namespace optimate::cpu {

struct MoeScratch {
  std::vector<float> router_logits;  // [tokens, experts]
  std::vector<int32_t> experts;      // [tokens, top_k]
  std::vector<float> weights;        // [tokens, top_k]
  ExpertGroups groups;
  std::vector<float> rows;     // [grouped rows, hidden]: each pair's input (padding rows zero)
  std::vector<float> gate_up;  // [grouped rows, 2 * expert_intermediate]
  std::vector<float> act;      // [grouped rows, expert_intermediate]
  std::vector<float> out;      // [grouped rows, hidden]: each pair's expert output
  Q8Activations q8;
};

// y = x w^T for `rows` rows: the runner's linear on the path its options chose.
using CpuMatmul = std::function<void(const float* x, const CpuMatrix& w, float* y, int64_t rows)>;

struct MoeContext {
  CpuThreadPool* pool = nullptr;
  CpuIsa isa = CpuIsa::kAvx2;
  CpuMatmul matmul;
};

// out[t] = sum over token t's experts, in ascending expert order, of weight * expert(h[t]), for
// t < num_tokens: h and out are [num_tokens, hidden].
void moe_mlp(const float* h, const CpuLayerWeights& w, const MoeConfig& moe, int64_t hidden, int64_t num_tokens,
             float* out, const MoeContext& ctx, MoeScratch& s);

}  // namespace optimate::cpu
