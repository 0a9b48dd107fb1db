// --quantization fp8 on the GPU: a model's linear projections (wqkv, wo, w_gate_up, w_down of
// every layer; with experts, every expert's gate/up and down, the router staying bf16) turned
// into e4m3 codes with one fp32 scale per output row, on the device (an
// 8B model's 16 GB never cross to the host). Embeddings, norms, biases and the LM head stay
// bf16: the LM head is one matrix of 32 and the logits are where rounding shows most.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_weights.h"
#include "model/model_config.h"

namespace optimate::cuda {

// Bytes the weights of `config` take on the GPU with FP8 linear layers.
int64_t cuda_fp8_weight_bytes(const ModelConfig& config);

// Quantizes `weights` (bf16) and frees the bf16 copies of what it quantized: the result holds
// the other tensors in a compact bf16 allocation and the codes and scales in fp8_storage.
// Error(kUnsupported) when a matrix's input width is not a multiple of 16.
CudaWeights quantize_weights_fp8(CudaWeights weights);

}  // namespace optimate::cuda
