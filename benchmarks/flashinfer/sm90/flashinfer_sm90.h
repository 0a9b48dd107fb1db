// FlashInfer's Hopper prefill (its FlashAttention-3 kernels: warpgroup MMA, producer and consumer
// warpgroups, the K/V pages gathered by its sparse mainloop) over the project's paged bf16 KV
// cache, as is: the same adapter as flashinfer_paged.h (a layer's K and V arenas are HND pages
// with separate K and V pointers and equal strides; a block table becomes a page list). Built
// for sm_90a alone, only where the build lists 90a and scripts/setup.sh unpacked CUTLASS's
// headers beside FlashInfer's.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../flashinfer_paged.h"

namespace optimate::cuda::bench {

// The plan (FlashInfer's SM90 work list over the multiprocessors, and its device copy) for one
// batch; run() replays it over any layer's arenas, so a CUDA graph can capture the layers' calls.
class FlashInferPrefillSm90 {
 public:
  FlashInferPrefillSm90(const FlashInferShape& shape, const FlashInferBatch& batch, cudaStream_t stream);
  ~FlashInferPrefillSm90();
  FlashInferPrefillSm90(const FlashInferPrefillSm90&) = delete;
  FlashInferPrefillSm90& operator=(const FlashInferPrefillSm90&) = delete;
  // out: [rows, num_qo_heads, head_dim].
  void run(const __nv_bfloat16* q, const __nv_bfloat16* k_arena, const __nv_bfloat16* v_arena,
           __nv_bfloat16* out, cudaStream_t stream) const;

 private:
  FlashInferShape shape_;
  int64_t batch_ = 0, rows_ = 0;
  std::vector<int64_t> plan_;  // FlashInfer's PrefillPlanSM90Info, as its ToVector() writes it
  void* int_ws_ = nullptr;
  void* pinned_ws_ = nullptr;
  int32_t* d_kv_indices_ = nullptr;
};

}  // namespace optimate::cuda::bench
