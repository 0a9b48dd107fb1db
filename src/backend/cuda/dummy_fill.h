// Fills device memory with the seeded dummy values of dummy_value.h.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

namespace optimate::cuda {

// dst[i] = bf16(dummy_value(seed, tensor_id, i, lo, hi)) for i in [0, n).
void dummy_fill(__nv_bfloat16* dst, int64_t n, uint64_t seed, uint32_t tensor_id, float lo,
                float hi);

}  // namespace optimate::cuda
