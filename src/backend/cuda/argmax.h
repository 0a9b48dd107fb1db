// Greedy sampling on the GPU: the index of each logits row's maximum.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace optimate::cuda {

// logits: [num_rows, vocab] fp32; token_ids: [num_rows] int32. Ties go to the lowest index
// (torch.argmax's rule), NaN is never chosen over a number.
void argmax_rows(const float* logits, int32_t* token_ids, int64_t num_rows, int64_t vocab,
                 cudaStream_t stream);

}  // namespace optimate::cuda
