// Block copies between the device arenas and the mapped host tier (see the header). A unit is
// one op's block of one layer's K or V: units are numbered (op, layer, K/V).
#include "backend/cuda/kv_swap.h"

#include "backend/cuda/cuda_check.h"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kInFlight = 4;  // 16-byte loads each thread has outstanding

__global__ void __launch_bounds__(kThreads)
    kv_swap_kernel(const KvSwapShape s, const KvSwapOp* __restrict__ ops, int64_t num_units) {
  const int64_t arenas = 2 * s.num_layers;
  for (int64_t u = blockIdx.x; u < num_units; u += gridDim.x) {
    const KvSwapOp op = ops[u / arenas];
    const int64_t arena = u % arenas;  // 2 layer + (0 K, 1 V)
    uint8_t* dev = s.device + (arena * s.device_slots + op.device_slot) * s.slot_bytes;
    uint8_t* host = s.host + (arena * s.host_slots + op.host_slot) * s.slot_bytes;
    const int4* src = reinterpret_cast<const int4*>(op.to_host ? dev : host);
    int4* dst = reinterpret_cast<int4*>(op.to_host ? host : dev);
    const int64_t n = op.num_slots * s.slot_bytes / 16;
    for (int64_t base = threadIdx.x; base < n; base += kThreads * kInFlight) {
      int4 v[kInFlight];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k)
        if (base + k * kThreads < n) v[k] = src[base + k * kThreads];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k)
        if (base + k * kThreads < n) dst[base + k * kThreads] = v[k];
    }
  }
}

}  // namespace

void kv_swap_copy(const KvSwapShape& s, const KvSwapOp* ops, int64_t num_ops, int num_ctas, cudaStream_t stream) {
  if (num_ops == 0) return;
  OPTIMATE_SHAPE_CHECK(s.device && s.host && ops && s.slot_bytes > 0 && s.slot_bytes % 16 == 0 && s.num_layers > 0 &&
                           s.device_slots > 0 && s.host_slots > 0 && num_ctas > 0,
                       "swap of {} ops over {} device and {} host slots of {} bytes, {} layers, {} CTAs", num_ops,
                       s.device_slots, s.host_slots, s.slot_bytes, s.num_layers, num_ctas);
  const int64_t units = num_ops * 2 * s.num_layers;
  const unsigned grid = static_cast<unsigned>(units < num_ctas ? units : num_ctas);
  kv_swap_kernel<<<grid, kThreads, 0, stream>>>(s, ops, units);
  OPTIMATE_CUDA_CHECK_LAUNCH("kv_swap_kernel");
}

}  // namespace optimate::cuda
