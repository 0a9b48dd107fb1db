// The MLP of one mixture-of-experts layer on the GPU, as the forward pass enqueues it: the router
// (Gemm: the decode GEMV for a few rows, cuBLASLt past them) into fp32 logits, moe_route,
// moe_align, the gate/up grouped GEMM with SiLU*mul, the down grouped GEMM, moe_combine. Every
// launch's shape follows from the step's token count alone, so a decode step replays in a CUDA
// graph; which experts run is decided on the device.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_weights.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/moe_routing.h"

namespace optimate::cuda {

// A step's routing and grouped rows, sized for max_tokens tokens.
struct MoeBuffers {
  DeviceBuffer<float> router_logits;        // [T, num_experts]
  DeviceBuffer<int32_t> ids;                // [T, top_k]
  DeviceBuffer<float> weights;              // [T, top_k]
  DeviceBuffer<int32_t> pairs, row_of;      // [T * top_k]
  DeviceBuffer<MoeTile> tiles;              // [moe_max_tiles(T * top_k, num_experts, 16)]
  DeviceBuffer<int32_t> num_tiles;          // [1]
  DeviceBuffer<__nv_bfloat16> act;          // [T * top_k, expert_inter]: SiLU(gate) * up, grouped rows
  DeviceBuffer<__nv_bfloat16> expert_out;   // [T * top_k, hidden]: each pair's expert output

  void allocate(const ModelConfig& c, int64_t max_tokens);
  static int64_t bytes(const ModelConfig& c, int64_t max_tokens);
};

// Error(kUnsupported) naming the limit when the GPU kernels cannot run this model's experts.
void check_moe_supported(const ModelConfig& c);

// x: [num_tokens, hidden] bf16, the layer's normed MLP input. `out` says where the weighted sum
// goes (its expert_out, ids, weights, row_of, num_tokens, top_k and hidden are filled in here).
void enqueue_moe(const ModelConfig& c, const CudaLayerWeights& w, const __nv_bfloat16* x, int64_t num_tokens,
                 MoeBuffers& b, Gemm& gemm, MoeCombineParams out, cudaStream_t stream);

}  // namespace optimate::cuda
