#include "flashinfer_prefill_tile.cuh"

namespace optimate::cuda::bench {
template cudaError_t flashinfer_prefill_tile<64>(const FiParams&, __nv_bfloat16*, float*, cudaStream_t);
}  // namespace optimate::cuda::bench
