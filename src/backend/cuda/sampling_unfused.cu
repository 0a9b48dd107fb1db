// The unfused sampling baseline, shaped like a framework's sampler: each stage is its own
// launch and hands its result to the next through device memory.
//   1. softmax_kernel: probs = softmax(logits / temperature), ids = 0..vocab-1, row max of z.
//   2. cub segmented radix sort of (prob, id) pairs, descending, one segment per row.
//   3. exclusive_cumsum_kernel: the cumulative probability before each sorted entry.
//   4. cut_kernel: top-k, top-p (over the top-k set) and min-p cut points -> a threshold on z.
//   5. draw_kernel: the same draw as the fused kernel (sampling_select.cuh), given the threshold.
// Launch: num_rows blocks of 1024 threads for 1, 3, 4 and 5.
#include <cub/device/device_segmented_radix_sort.cuh>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_paths.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/sampling_select.cuh"

namespace optimate::cuda {
namespace {

using namespace sampling_detail;
using FloatReduce = cub::BlockReduce<float, kThreads>;
using FloatScan = cub::BlockScan<float, kThreads>;
using IntReduce = cub::BlockReduce<int, kThreads>;

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

struct CutShared {
  union {
    FloatReduce::TempStorage reduce;
    FloatScan::TempStorage scan;
    IntReduce::TempStorage count;
  } cub;
  float value;
  int count;
};

__device__ __forceinline__ float row_temperature(const GpuSampleRow& r) {
  return r.greedy ? 1.0f : r.temperature;
}

__global__ void __launch_bounds__(kThreads) softmax_kernel(
    const float* __restrict__ logits, const GpuSampleRow* __restrict__ rows,
    float* __restrict__ probs, int32_t* __restrict__ ids, float* __restrict__ row_max, int vocab) {
  __shared__ CutShared sh;
  const float t = row_temperature(rows[blockIdx.x]);
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * vocab;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) m = fmaxf(m, scaled(logits[offset + i], t));
  m = FloatReduce(sh.cub.reduce).Reduce(m, MaxOp{});
  if (threadIdx.x == 0) sh.value = m;
  __syncthreads();
  m = sh.value;
  __syncthreads();
  float sum = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kThreads) sum += expf(scaled(logits[offset + i], t) - m);
  sum = FloatReduce(sh.cub.reduce).Sum(sum);
  if (threadIdx.x == 0) sh.value = sum;
  __syncthreads();
  const float inv_sum = 1.0f / sh.value;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    probs[offset + i] = expf(scaled(logits[offset + i], t) - m) * inv_sum;
    ids[offset + i] = i;
  }
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

__global__ void __launch_bounds__(kThreads) exclusive_cumsum_kernel(
    const float* __restrict__ sorted_probs, float* __restrict__ exclusive_sums, int vocab) {
  __shared__ CutShared sh;
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * vocab;
  float carry = 0.0f;
  for (int base = 0; base < vocab; base += kThreads) {
    const int i = base + threadIdx.x;
    const float p = i < vocab ? sorted_probs[offset + i] : 0.0f;
    float before = 0.0f;
    float tile_total = 0.0f;
    FloatScan(sh.cub.scan).ExclusiveSum(p, before, tile_total);
    if (i < vocab) exclusive_sums[offset + i] = carry + before;
    carry += tile_total;
    __syncthreads();
  }
}

// Threshold on z per row: the z of the last sorted entry kept by top-k and top-p, raised to
// the min-p threshold; -inf when nothing is cut.
__global__ void __launch_bounds__(kThreads) cut_kernel(
    const float* __restrict__ logits, const GpuSampleRow* __restrict__ rows,
    const float* __restrict__ sorted_probs, const int32_t* __restrict__ sorted_ids,
    const float* __restrict__ exclusive_sums, const float* __restrict__ row_max,
    float* __restrict__ thresholds, int vocab) {
  __shared__ CutShared sh;
  const GpuSampleRow r = rows[blockIdx.x];
  if (r.greedy) {
    if (threadIdx.x == 0) thresholds[blockIdx.x] = INFINITY;
    return;
  }
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * vocab;
  const int k = (r.top_k > 0 && r.top_k < vocab) ? r.top_k : vocab;
  int last = vocab - 1;  // the last kept sorted position
  if (k < vocab) {
    // Ties with the k-th value stay in, as the CPU rule keeps every z >= the k-th largest.
    const float kth = sorted_probs[offset + k - 1];
    int ties = 0;
    for (int i = k + threadIdx.x; i < vocab; i += kThreads) ties += sorted_probs[offset + i] == kth;
    ties = IntReduce(sh.cub.count).Sum(ties);
    if (threadIdx.x == 0) sh.count = ties;
    __syncthreads();
    last = k - 1 + sh.count;
    __syncthreads();
  }
  if (r.top_p < 1.0f) {
    const float mass = r.top_p * (exclusive_sums[offset + last] + sorted_probs[offset + last]);
    int kept = 0;
    for (int i = threadIdx.x; i <= last; i += kThreads) kept += exclusive_sums[offset + i] < mass;
    kept = IntReduce(sh.cub.count).Sum(kept);
    if (threadIdx.x == 0) sh.count = kept;
    __syncthreads();
    last = min(last, max(sh.count, 1) - 1);
  }
  if (threadIdx.x == 0) {
    float threshold = -INFINITY;
    if (last < vocab - 1) threshold = scaled(logits[offset + sorted_ids[offset + last]], r.temperature);
    if (r.log_min_p > -INFINITY) threshold = fmaxf(threshold, row_max[blockIdx.x] + r.log_min_p);
    thresholds[blockIdx.x] = threshold;
  }
}

template <int kCopies>
__global__ void __launch_bounds__(kThreads) draw_kernel(
    const float* __restrict__ logits, const GpuSampleRow* __restrict__ rows,
    const float* __restrict__ row_max, const float* __restrict__ thresholds,
    int32_t* __restrict__ token_ids, int vocab) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto& sh = *reinterpret_cast<SharedState<kCopies>*>(smem);
  const GpuSampleRow r = rows[blockIdx.x];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const ArgMax best = block_argmax(row, vocab, sh);
  if (r.greedy) {
    if (threadIdx.x == 0) token_ids[blockIdx.x] = best.index;
    return;
  }
  const float threshold = thresholds[blockIdx.x];
  const uint32_t keep_key = threshold == -INFINITY ? 0u : order_key(threshold);
  const float u = sampling_uniform(r.seed, r.output_index);
  const int token = draw_token(row, vocab, r.temperature, row_max[blockIdx.x], keep_key, u,
                               best.index, sh);
  if (threadIdx.x == 0) token_ids[blockIdx.x] = token;
}

__global__ void segment_offsets_kernel(int32_t* offsets, int num_rows, int vocab) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= num_rows) offsets[i] = i * vocab;
}

}  // namespace

UnfusedSampler::UnfusedSampler(int64_t max_rows, int64_t vocab) : max_rows_(max_rows), vocab_(vocab) {
  OPTIMATE_SHAPE_CHECK(vocab > 0 && max_rows > 0 && max_rows * vocab < (int64_t{1} << 31),
                       "max_rows {} vocab {}", max_rows, vocab);
  const size_t n = static_cast<size_t>(max_rows * vocab);
  probs_.resize(n);
  sorted_probs_.resize(n);
  ids_.resize(n);
  sorted_ids_.resize(n);
  exclusive_sums_.resize(n);
  row_max_.resize(max_rows);
  thresholds_.resize(max_rows);
  offsets_.resize(max_rows + 1);
  segment_offsets_kernel<<<static_cast<unsigned>((max_rows + 256) / 256), 256>>>(
      offsets_.get(), static_cast<int>(max_rows), static_cast<int>(vocab));
  OPTIMATE_CUDA_CHECK_LAUNCH("segment_offsets_kernel");
  size_t temp_bytes = 0;
  OPTIMATE_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, temp_bytes, probs_.get(), sorted_probs_.get(), ids_.get(), sorted_ids_.get(),
      static_cast<int>(n), static_cast<int>(max_rows), offsets_.get(), offsets_.get() + 1));
  sort_temp_.resize(std::max<size_t>(temp_bytes, 1));
  // The fused kernel's shared state (its histograms unused here), sized as the fused kernel's.
  hist_copies_ = hist_copies_for(device_kernel_paths().variant_smem_bytes);
  if (hist_copies_ == 8)
    OPTIMATE_CUDA_CHECK(cudaFuncSetAttribute(draw_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(sizeof(SharedState<8>))));
  else
    OPTIMATE_CUDA_CHECK(cudaFuncSetAttribute(draw_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(sizeof(SharedState<4>))));
  OPTIMATE_CUDA_CHECK(cudaDeviceSynchronize());
}

void UnfusedSampler::sample(const float* logits, const GpuSampleRow* rows, int32_t* token_ids,
                            float* thresholds, int64_t num_rows, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(num_rows >= 0 && num_rows <= max_rows_, "num_rows {} (at most {})",
                       num_rows, max_rows_);
  if (thresholds == nullptr) thresholds = thresholds_.get();
  if (num_rows == 0) return;
  const int vocab = static_cast<int>(vocab_);
  const dim3 grid(static_cast<unsigned>(num_rows));
  softmax_kernel<<<grid, kThreads, 0, stream>>>(logits, rows, probs_.get(), ids_.get(),
                                                row_max_.get(), vocab);
  OPTIMATE_CUDA_CHECK_LAUNCH("softmax_kernel");
  size_t temp_bytes = sort_temp_.bytes();
  OPTIMATE_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      sort_temp_.get(), temp_bytes, probs_.get(), sorted_probs_.get(), ids_.get(),
      sorted_ids_.get(), static_cast<int>(num_rows * vocab_), static_cast<int>(num_rows),
      offsets_.get(), offsets_.get() + 1, 0, 32, stream));
  exclusive_cumsum_kernel<<<grid, kThreads, 0, stream>>>(sorted_probs_.get(), exclusive_sums_.get(), vocab);
  OPTIMATE_CUDA_CHECK_LAUNCH("exclusive_cumsum_kernel");
  cut_kernel<<<grid, kThreads, 0, stream>>>(logits, rows, sorted_probs_.get(), sorted_ids_.get(),
                                            exclusive_sums_.get(), row_max_.get(), thresholds, vocab);
  OPTIMATE_CUDA_CHECK_LAUNCH("cut_kernel");
  if (hist_copies_ == 8)
    draw_kernel<8><<<grid, kThreads, sizeof(SharedState<8>), stream>>>(logits, rows, row_max_.get(), thresholds,
                                                                       token_ids, vocab);
  else
    draw_kernel<4><<<grid, kThreads, sizeof(SharedState<4>), stream>>>(logits, rows, row_max_.get(), thresholds,
                                                                       token_ids, vocab);
  OPTIMATE_CUDA_CHECK_LAUNCH("draw_kernel");
}

}  // namespace optimate::cuda
