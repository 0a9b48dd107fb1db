// The tensor-core decode attention kernel (paged_attention.h picks it).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/paged_attention.h"

namespace optimate::cuda {

// Needs block_size % 16 == 0 and num_heads / num_kv_heads <= 8 (the caller checks). Combines
// splits in the same launch when split_counters is set; else leaves the partials for
// paged_attention_combine_kernel.
void paged_attention_tensor_cores(const PagedAttentionParams& p, cudaStream_t stream);

}  // namespace optimate::cuda
