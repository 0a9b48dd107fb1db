// The fused sampling kernel: one block of 1024 threads per logits row, every stage in one
// launch, the row re-read from L2 (or HBM for large batches) by each pass instead of sorted:
//   argmax pass (greedy rows stop here) -> top-k radix select (3 passes, when 0 < k < vocab)
//   -> top-p weighted radix select over the top-k set (3 passes, when p < 1) -> min-p
//   threshold (no pass) -> total kept weight (1 pass) -> draw (one pass over the ids up to the
//   chosen one).
// Layouts: logits [num_rows, vocab] fp32, rows [num_rows], token_ids [num_rows] int32,
// thresholds [num_rows] fp32 (optional). Launch: num_rows blocks of 1024 threads.
#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/per_device.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernel_paths.h"
#include "backend/cuda/programmatic_launch.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/sampling_select.cuh"

namespace optimate::cuda {
namespace {

using namespace sampling_detail;

template <int kCopies>
__global__ void __launch_bounds__(kThreads) fused_sampling_kernel(
    const float* __restrict__ logits, const GpuSampleRow* __restrict__ rows,
    int32_t* __restrict__ token_ids, float* __restrict__ thresholds, int vocab) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto& sh = *reinterpret_cast<SharedState<kCopies>*>(smem);
  wait_for_prior_grid();
  allow_next_grid();
  const GpuSampleRow r = rows[blockIdx.x];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const ArgMax best = block_argmax(row, vocab, sh);
  if (r.greedy) {
    if (threadIdx.x == 0) {
      token_ids[blockIdx.x] = best.index;
      if (thresholds) thresholds[blockIdx.x] = INFINITY;
    }
    return;
  }
  const float t = r.temperature;
  // Division is monotone, so the max of z is the max logit divided once.
  const float max_z = scaled(best.value, t);
  uint32_t keep_key = 0;  // every key is >= 0: nothing cut
  if (r.top_k > 0 && r.top_k < vocab)
    keep_key = radix_select<false>(row, vocab, t, max_z, 0, static_cast<double>(r.top_k), sh);
  if (r.top_p < 1.0f)
    keep_key = max(keep_key, radix_select<true>(row, vocab, t, max_z, keep_key,
                                                static_cast<double>(r.top_p), sh));
  if (r.log_min_p > -INFINITY) keep_key = max(keep_key, order_key(max_z + r.log_min_p));
  const float u = sampling_uniform(r.seed, r.output_index);
  const int token = draw_token(row, vocab, t, max_z, keep_key, u, best.index, sh);
  if (threadIdx.x == 0) {
    token_ids[blockIdx.x] = token;
    if (thresholds) thresholds[blockIdx.x] = keep_key == 0 ? -INFINITY : key_value(keep_key);
  }
}

template <int kCopies>
void launch_fused(const float* logits, const GpuSampleRow* rows, int32_t* token_ids, float* thresholds,
                  int64_t num_rows, int64_t vocab, cudaStream_t stream) {
  constexpr size_t bytes = sizeof(SharedState<kCopies>);
  static PerDeviceOnce smem_raised;
  once_per_device(smem_raised, [] {
    OPTIMATE_CUDA_CHECK(cudaFuncSetAttribute(fused_sampling_kernel<kCopies>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  });
  launch_programmatic(fused_sampling_kernel<kCopies>, dim3(static_cast<unsigned>(num_rows)), dim3(kThreads), bytes,
                      stream, "fused_sampling_kernel", logits, rows, token_ids, thresholds, static_cast<int>(vocab));
}

}  // namespace

void sample_rows_fused(const float* logits, const GpuSampleRow* rows, int32_t* token_ids,
                       float* thresholds, int64_t num_rows, int64_t vocab, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(vocab > 0 && vocab < (int64_t{1} << 30), "vocab {}", vocab);
  OPTIMATE_SHAPE_CHECK(num_rows >= 0 && num_rows < (int64_t{1} << 31), "num_rows {}", num_rows);
  if (num_rows == 0) return;
  if (hist_copies_for(device_kernel_paths().variant_smem_bytes) == 8)
    launch_fused<8>(logits, rows, token_ids, thresholds, num_rows, vocab, stream);
  else
    launch_fused<4>(logits, rows, token_ids, thresholds, num_rows, vocab, stream);
}

}  // namespace optimate::cuda
