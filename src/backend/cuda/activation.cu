// silu(gate) * up over the fused gate/up projection, in fp32, rounded once to bf16 (and, for an
// FP8 linear's input, then to e4m3 per row).
// Layouts: gate_up [num_tokens, 2 * intermediate] bf16, out [num_tokens, intermediate] bf16 (or
// codes [num_tokens, intermediate] e4m3 + scales [num_tokens] fp32).
//
// kCurrent, intermediate a multiple of 8: silu_mul_tiles_kernel, a grid of (token, 256 groups
// of 8 outputs): each thread one group, two 16-byte loads and one 16-byte store, with no
// division to find its row. FP8 output: silu_mul_fp8_kernel, one block of 256 threads per
// token keeping the row's bf16 outputs in shared memory until its absmax is known.
// kBaseline: grid-stride over groups of 8 (16-byte accesses) when intermediate is a multiple
// of 8, else over single elements, each finding its row by a 64-bit division.
#include "backend/cuda/activation.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/row_kernel.cuh"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }

__device__ __forceinline__ void silu_mul8(const uint4& gate, const uint4& up, float (&y)[8]) {
  float g[8], u[8];
  unpack_bf16x8(*reinterpret_cast<const Bf16x8*>(&gate), g);
  unpack_bf16x8(*reinterpret_cast<const Bf16x8*>(&up), u);
#pragma unroll
  for (int i = 0; i < 8; ++i) y[i] = silu(g[i]) * u[i];
}

__global__ void __launch_bounds__(kThreads)
    silu_mul_tiles_kernel(const __nv_bfloat16* __restrict__ gate_up, __nv_bfloat16* __restrict__ out,
                          int intermediate) {
  const int g = blockIdx.y * kThreads + threadIdx.x;
  if (g >= intermediate / 8) return;
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* row = gate_up + t * 2 * intermediate;
  const uint4 gate = load_16_bytes(row + 8 * g), up = load_16_bytes(row + intermediate + 8 * g);
  float y[8];
  silu_mul8(gate, up, y);
  store_bf16x8(out + t * intermediate + 8 * g, y);
}

// The row's bf16 outputs wait in shared memory (28 KiB for 14336) rather than registers until
// the row's absmax is known: registers for a whole row held one block per SM, so one row's
// loads, arithmetic and stores ran in turn; this way eight blocks per SM overlap them.
__global__ void __launch_bounds__(kThreads)
    silu_mul_fp8_kernel(const __nv_bfloat16* __restrict__ gate_up, uint8_t* __restrict__ codes,
                        float* __restrict__ scales, int intermediate) {
  extern __shared__ uint4 row_bf16[];  // [intermediate / 8] groups of 8 bf16 outputs
  __shared__ float scratch[32];
  constexpr int kUnroll = 2;  // groups loaded before any is computed
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* row = gate_up + t * 2 * intermediate;
  const int groups = intermediate / 8;
  float absmax = 0.0f;
  for (int g0 = threadIdx.x; g0 < groups; g0 += kUnroll * kThreads) {
    uint4 gate[kUnroll], up[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int g = g0 + u * kThreads;
      if (g < groups) gate[u] = load_16_bytes(row + 8 * g), up[u] = load_16_bytes(row + intermediate + 8 * g);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int g = g0 + u * kThreads;
      if (g >= groups) break;
      float v[8];
      silu_mul8(gate[u], up[u], v);
      const uint4 y = pack_bf16x8(v);
      row_bf16[g] = y;
      unpack_bf16x8(*reinterpret_cast<const Bf16x8*>(&y), v);
#pragma unroll
      for (int i = 0; i < 8; ++i) absmax = fmaxf(absmax, fabsf(v[i]));
    }
  }
  absmax = block_reduce<true>(absmax, scratch);  // its barrier also publishes row_bf16
  const float scale = __fdiv_rn(absmax, 448.0f);
  if (threadIdx.x == 0) scales[t] = scale;
  uint8_t* dst = codes + t * intermediate;
  for (int g = threadIdx.x; g < groups; g += kThreads) {
    float v[8];
    unpack_bf16x8(*reinterpret_cast<const Bf16x8*>(&row_bf16[g]), v);
    *reinterpret_cast<uint2*>(dst + 8 * g) = fp8_codes8(v, scale);
  }
}

__global__ void silu_mul_vec8_kernel(const __nv_bfloat16* __restrict__ gate_up,
                                     __nv_bfloat16* __restrict__ out, int64_t num_groups,
                                     int64_t intermediate) {
  const int64_t groups_per_row = intermediate / 8;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; g < num_groups;
       g += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = g / groups_per_row;
    const int64_t c = (g % groups_per_row) * 8;
    float gate[8], up[8], y[8];
    load_bf16x8(gate_up + t * 2 * intermediate + c, gate);
    load_bf16x8(gate_up + t * 2 * intermediate + intermediate + c, up);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = silu(gate[i]) * up[i];
    store_bf16x8(out + t * intermediate + c, y);
  }
}

__global__ void silu_mul_scalar_kernel(const __nv_bfloat16* __restrict__ gate_up,
                                       __nv_bfloat16* __restrict__ out, int64_t num_elems,
                                       int64_t intermediate) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < num_elems;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = i / intermediate;
    const int64_t c = i % intermediate;
    const float gate = __bfloat162float(gate_up[t * 2 * intermediate + c]);
    const float up = __bfloat162float(gate_up[t * 2 * intermediate + intermediate + c]);
    out[i] = __float2bfloat16(silu(gate) * up);
  }
}

int grid_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65536 ? blocks : 65536);
}

void check_shape(int64_t num_tokens, int64_t intermediate) {
  OPTIMATE_SHAPE_CHECK(num_tokens >= 0 && num_tokens < (int64_t{1} << 31) && intermediate > 0 &&
                           intermediate < (int64_t{1} << 30),
                       "tokens {} intermediate {}", num_tokens, intermediate);
}

}  // namespace

bool silu_mul_fp8_fits(int64_t intermediate) { return intermediate % 8 == 0 && intermediate <= 65536; }

void silu_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t num_tokens,
              int64_t intermediate, cudaStream_t stream, ElementwiseKernels kernels) {
  check_shape(num_tokens, intermediate);
  if (num_tokens == 0) return;
  if (intermediate % 8 == 0 && kernels == ElementwiseKernels::kCurrent) {
    const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>((intermediate / 8 + kThreads - 1) / kThreads));
    silu_mul_tiles_kernel<<<grid, kThreads, 0, stream>>>(gate_up, out, static_cast<int>(intermediate));
    OPTIMATE_CUDA_CHECK_LAUNCH("silu_mul_tiles_kernel");
  } else if (intermediate % 8 == 0) {
    const int64_t groups = num_tokens * intermediate / 8;
    silu_mul_vec8_kernel<<<grid_for(groups), kThreads, 0, stream>>>(gate_up, out, groups,
                                                                    intermediate);
    OPTIMATE_CUDA_CHECK_LAUNCH("silu_mul_vec8_kernel");
  } else {
    const int64_t n = num_tokens * intermediate;
    silu_mul_scalar_kernel<<<grid_for(n), kThreads, 0, stream>>>(gate_up, out, n, intermediate);
    OPTIMATE_CUDA_CHECK_LAUNCH("silu_mul_scalar_kernel");
  }
}

void silu_mul_fp8(const __nv_bfloat16* gate_up, const Fp8Activations& out, int64_t num_tokens,
                  int64_t intermediate, cudaStream_t stream) {
  check_shape(num_tokens, intermediate);
  OPTIMATE_SHAPE_CHECK(out.codes && out.scales, "null FP8 output");
  OPTIMATE_SHAPE_CHECK(silu_mul_fp8_fits(intermediate), "FP8 SiLU*mul: intermediate {} (a multiple of 8, at most 65536)",
                       intermediate);
  if (num_tokens == 0) return;
  const int smem_bytes = static_cast<int>(intermediate) * 2;
  if (smem_bytes > 48 * 1024)  // past the default dynamic shared memory a launch may take
    OPTIMATE_CUDA_CHECK(
        cudaFuncSetAttribute(silu_mul_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  silu_mul_fp8_kernel<<<static_cast<unsigned>(num_tokens), kThreads, smem_bytes, stream>>>(
      gate_up, reinterpret_cast<uint8_t*>(out.codes), out.scales, static_cast<int>(intermediate));
  OPTIMATE_CUDA_CHECK_LAUNCH("silu_mul_fp8_kernel");
}

}  // namespace optimate::cuda
