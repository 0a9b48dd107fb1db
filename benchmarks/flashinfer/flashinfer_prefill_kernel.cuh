// The FlashInfer prefill kernel this benchmark instantiates: bf16 Q, KV and output, int32
// indices, head dim 128, causal, no positional encoding in the kernel (the project's RoPE is
// applied before the cache write). One translation unit per query tile (flashinfer_tile*.cu),
// so nvcc compiles them side by side.
#pragma once

#include <cuda_bf16.h>

#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/variants.cuh>

namespace optimate::cuda::bench {

using FiParams = flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int32_t>;
using FiVariant = flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false,
                                               /*logits_soft_cap=*/false, /*alibi=*/false>;
inline constexpr uint32_t kFiHeadDim = 128;

template <uint32_t CTA_TILE_Q>
cudaError_t flashinfer_prefill_tile(const FiParams& params, __nv_bfloat16* tmp_v, float* tmp_s, cudaStream_t stream);

}  // namespace optimate::cuda::bench
