// The definition of flashinfer_prefill_tile, which flashinfer_tile{16,64,128}.cu instantiate one
// query tile each, so nvcc compiles the three kernels side by side.
#pragma once

#include <flashinfer/attention/prefill.cuh>

#include "flashinfer_prefill_kernel.cuh"

namespace optimate::cuda::bench {

template <uint32_t CTA_TILE_Q>
cudaError_t flashinfer_prefill_tile(const FiParams& params, __nv_bfloat16* tmp_v, float* tmp_s, cudaStream_t stream) {
  return flashinfer::BatchPrefillWithPagedKVCacheDispatched<
      /*SAME_KV_STRIDES=*/true, CTA_TILE_Q, kFiHeadDim, kFiHeadDim, flashinfer::PosEncodingMode::kNone,
      /*USE_FP16_QK_REDUCTION=*/false, flashinfer::MaskMode::kCausal, FiVariant, FiParams>(
      params, tmp_v, tmp_s, /*enable_pdl=*/false, stream);
}

}  // namespace optimate::cuda::bench
