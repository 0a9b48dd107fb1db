// A Llama-family model's weights resident on the GPU in bf16, in one allocation laid out by
// weight_layout.h, with the fused QKV and gate/up matrices the forward pass multiplies by.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_bf16.h>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/fp8_quantize.h"
#include "backend/cuda/weight_layout.h"
#include "model/weights.h"

namespace optimate::cuda {

struct CudaLayerWeights {
  const __nv_bfloat16* attn_norm = nullptr;  // (hidden)
  const __nv_bfloat16* wqkv = nullptr;       // (q_dim + 2 * kv_dim, hidden)
  const __nv_bfloat16* bqkv = nullptr;       // (q_dim + 2 * kv_dim) or null
  const __nv_bfloat16* q_norm = nullptr;     // (head_dim) or null (Qwen3's per-head norms)
  const __nv_bfloat16* k_norm = nullptr;     // (head_dim) or null
  const __nv_bfloat16* wo = nullptr;         // (hidden, q_dim)
  const __nv_bfloat16* ffn_norm = nullptr;   // (hidden)
  const __nv_bfloat16* w_gate_up = nullptr;  // (2 * intermediate, hidden); null with experts
  const __nv_bfloat16* w_down = nullptr;     // (hidden, intermediate)
  // A mixture of experts (weight_layout.h): the router stays bf16 whatever the quantization.
  const __nv_bfloat16* router = nullptr;           // (num_experts, hidden)
  const __nv_bfloat16* experts_gate_up = nullptr;  // (num_experts, 2 * expert_inter, hidden)
  const __nv_bfloat16* experts_down = nullptr;     // (num_experts, hidden, expert_inter)
  // FP8 weights (fp8_weights.h): the same matrices as e4m3 codes with row scales (experts:
  // [num_experts, rows] scales), set in place of the bf16 pointers above, which are then null.
  Fp8Weight wqkv_fp8, wo_fp8, w_gate_up_fp8, w_down_fp8;
  Fp8Weight experts_gate_up_fp8, experts_down_fp8;
};

struct CudaWeights {
  ModelConfig config;
  DeviceBuffer<__nv_bfloat16> storage;
  const __nv_bfloat16* tok_embeddings = nullptr;  // (vocab, hidden)
  const __nv_bfloat16* final_norm = nullptr;      // (hidden)
  const __nv_bfloat16* lm_head = nullptr;         // (vocab, hidden); tok_embeddings when tied
  std::vector<CudaLayerWeights> layers;
  DeviceBuffer<uint8_t> fp8_storage;  // FP8 layers' codes, then their scales; empty in bf16

  bool fp8() const { return !fp8_storage.empty(); }
  size_t bytes() const { return storage.bytes() + fp8_storage.bytes(); }
};

// Bytes the weights of `config` take on the GPU (every expert of a mixture of experts).
int64_t cuda_weight_bytes(const ModelConfig& config);

// Copies host weights to the GPU: bf16 tensors byte for byte, every other dtype (F32, F16,
// GGUF quantized) through to_f32 and rounded to bf16. Shapes are checked against the config.
CudaWeights upload_weights(const LoadedModel& model);

// Seeded random weights of any shape, generated on the GPU (no host copy, so an 8B-shaped
// model costs seconds): linear and embedding weights uniform with standard deviation 0.02,
// norm weights uniform in [0.8, 1.2], biases uniform in [-0.1, 0.1].
CudaWeights make_dummy_weights(const ModelConfig& config, uint64_t seed);

// The same values as make_dummy_weights, as a host LoadedModel (bf16 tensors), so tests and
// other backends can run the identical model. Meant for small configs.
LoadedModel make_dummy_model(const ModelConfig& config, uint64_t seed);

}  // namespace optimate::cuda
