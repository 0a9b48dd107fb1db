// Grouped expert GEMMs (moe_gemm.h).
//
// A block computes one tile: BM rows of one expert (moe_align's MoeTile) times BN output
// columns (BN of gate and the same BN of up for kSiluGateUp), over k in steps of 64. Its 4
// warps split the tile WARPS_M x WARPS_N; a warp holds (BM / WARPS_M) x (BN / WARPS_N) fp32
// accumulators per matrix. Operands stage through shared memory by cp.async, STAGES k-steps in
// flight: A rows by index (the gathered token's row, zero-filled past the tile's rows or k), B
// rows of the expert's weight (zero-filled past n or k). Rows are padded by 16 bytes (bf16: 144
// bytes a row, fp8: 80), so the 8 rows an ldmatrix (or a warp's fragment loads) touches fall on
// distinct banks. bf16 B fragments come by ldmatrix; FP8 B fragments are read as e4m3 pairs and
// widened (e4m3 -> f16 -> f32 -> bf16, exact) before the mma, the row scales applied to the fp32
// sums in the epilogue.
#include "backend/cuda/moe_gemm.h"

#include <algorithm>
#include <mutex>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/e4m3.cuh"

namespace optimate::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kBK = 64;
constexpr int kBf16Ld = kBK + 8;  // elements per staged bf16 row
constexpr int kFp8Ld = kBK + 16;  // bytes per staged e4m3 row

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const __nv_bfloat16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(row)));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two e4m3 codes (low byte first) as the bf16 pair of an mma fragment register.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint16_t codes) {
  const uint32_t h2 = e4m3x2_to_half2_bits(codes);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
  return pack_bf16(f.x, f.y);
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES, bool kDual, bool kFp8>
struct Tile {
  static_assert(WARPS_M * WARPS_N * 32 == kThreads, "four warps");
  static constexpr int kWM = BM / WARPS_M, kWN = BN / WARPS_N;
  static constexpr int kMT = kWM / 16, kNT = kWN / 8;
  static_assert(kMT >= 1 && kNT >= 1 && kWM % 16 == 0 && kWN % 8 == 0, "warp tile of whole mma tiles");
  static constexpr int kMats = kDual ? 2 : 1;
  static constexpr int kBRows = kMats * BN;
  static constexpr int kAStage = BM * kBf16Ld * 2;                         // bytes
  static constexpr int kBStage = kBRows * (kFp8 ? kFp8Ld : kBf16Ld * 2);   // bytes
  static constexpr int kSmemBytes = STAGES * (kAStage + kBStage) + BM * 4;
};

template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES, bool kDual, bool kFp8>
__global__ void __launch_bounds__(kThreads) moe_gemm_kernel(MoeGemmParams p) {
  using T = Tile<BM, BN, WARPS_M, WARPS_N, STAGES, kDual, kFp8>;
  if (static_cast<int>(blockIdx.x) >= *p.num_tiles) return;  // the whole block: before any barrier
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* a_stages = smem;
  uint8_t* b_stages = smem + STAGES * T::kAStage;
  int* a_rows = reinterpret_cast<int*>(smem + STAGES * (T::kAStage + T::kBStage));

  const MoeTile tile = p.tiles[blockIdx.x];
  const int rows = tile.end - tile.begin;
  const int n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  const int n0 = blockIdx.y * BN;
  const int64_t w_rows = kDual ? 2 * static_cast<int64_t>(n) : n;  // rows of one expert's weight
  for (int i = threadIdx.x; i < BM; i += kThreads) {
    const int r = tile.begin + i;
    a_rows[i] = i >= rows ? -1 : kDual ? p.pairs[r] / static_cast<int>(p.top_k) : r;
  }
  __syncthreads();

  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * kBK;
    auto* sa = reinterpret_cast<__nv_bfloat16*>(a_stages + stage * T::kAStage);
    for (int c = threadIdx.x; c < BM * 8; c += kThreads) {
      const int r = c / 8, kk = k0 + (c % 8) * 8, src_row = a_rows[r];
      const bool valid = src_row >= 0 && kk < k;
      cp_async16(sa + r * kBf16Ld + (c % 8) * 8, valid ? p.a + static_cast<int64_t>(src_row) * k + kk : p.a, valid);
    }
    uint8_t* sb = b_stages + stage * T::kBStage;
    constexpr int kChunks = kFp8 ? 4 : 8;  // 16-byte pieces of a 64-element row
    for (int c = threadIdx.x; c < T::kBRows * kChunks; c += kThreads) {
      const int r = c / kChunks, piece = c % kChunks;
      const int col = n0 + r % BN;                                      // output column
      const int64_t w_row = static_cast<int64_t>(tile.expert) * w_rows + (r >= BN ? n : 0) + col;
      const int kk = k0 + piece * (kFp8 ? 16 : 8);
      const bool valid = col < n && kk < k;
      if constexpr (kFp8) {
        cp_async16(sb + r * kFp8Ld + piece * 16,
                   valid ? reinterpret_cast<const uint8_t*>(p.w_fp8) + w_row * k + kk
                         : reinterpret_cast<const uint8_t*>(p.w_fp8),
                   valid);
      } else {
        cp_async16(sb + (r * kBf16Ld + piece * 8) * 2, valid ? p.w + w_row * k + kk : p.w, valid);
      }
    }
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int g = lane / 4, t4 = lane % 4;
  float acc[T::kMats][T::kMT][T::kNT][4] = {};

  const int num_k_tiles = (k + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < num_k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < num_k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage kt landed for every thread; stage kt - 1 is no longer read
    if (kt + STAGES - 1 < num_k_tiles) load_stage((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
    cp_async_commit();
    const int stage = kt % STAGES;
    const auto* sa = reinterpret_cast<const __nv_bfloat16*>(a_stages + stage * T::kAStage);
    const uint8_t* sb = b_stages + stage * T::kBStage;
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t a[T::kMT][4];
#pragma unroll
      for (int mi = 0; mi < T::kMT; ++mi)
        ldmatrix_x4(a[mi], sa + (wm * T::kWM + mi * 16 + lane % 16) * kBf16Ld + ks * 16 + (lane / 16) * 8);
#pragma unroll
      for (int m = 0; m < T::kMats; ++m) {
#pragma unroll
        for (int ni = 0; ni < T::kNT; ++ni) {
          const int b_row = m * BN + wn * T::kWN + ni * 8;
          uint32_t b[2];
          if constexpr (kFp8) {
            const uint8_t* row = sb + (b_row + g) * kFp8Ld + ks * 16 + 2 * t4;
            b[0] = e4m3x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(row));
            b[1] = e4m3x2_to_bf16x2(*reinterpret_cast<const uint16_t*>(row + 8));
          } else {
            const auto* sbf = reinterpret_cast<const __nv_bfloat16*>(sb);
            ldmatrix_x2(b, sbf + (b_row + lane % 8) * kBf16Ld + ks * 16 + ((lane / 8) % 2) * 8);
          }
#pragma unroll
          for (int mi = 0; mi < T::kMT; ++mi) mma_bf16(acc[m][mi][ni], a[mi], b[0], b[1]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Accumulator c[2 i + j] is row g + 8 i, column 2 t4 + j of its 16 x 8 tile.
#pragma unroll
  for (int mi = 0; mi < T::kMT; ++mi) {
#pragma unroll
    for (int ni = 0; ni < T::kNT; ++ni) {
      const int col = n0 + wn * T::kWN + ni * 8 + 2 * t4;
      if (col >= n) continue;
      float scale[T::kMats][2];
#pragma unroll
      for (int m = 0; m < T::kMats; ++m)
#pragma unroll
        for (int j = 0; j < 2; ++j)
          scale[m][j] = kFp8 ? p.w_scale[static_cast<int64_t>(tile.expert) * w_rows + m * n + col + j] : 1.0f;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = wm * T::kWM + mi * 16 + g + 8 * i;
        if (r >= rows) continue;
        float y[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float first = acc[0][mi][ni][2 * i + j] * scale[0][j];
          if constexpr (kDual) {
            const float up = acc[T::kMats - 1][mi][ni][2 * i + j] * scale[T::kMats - 1][j];
            y[j] = silu(round_bf16(first)) * round_bf16(up);
          } else {
            y[j] = first;
          }
        }
        *reinterpret_cast<__nv_bfloat162*>(p.out + static_cast<int64_t>(tile.begin + r) * n + col) =
            __floats2bfloat162_rn(y[0], y[1]);
      }
    }
  }
}

template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES, bool kDual, bool kFp8>
void launch(const MoeGemmParams& p, cudaStream_t stream) {
  using T = Tile<BM, BN, WARPS_M, WARPS_N, STAGES, kDual, kFp8>;
  auto kernel = moe_gemm_kernel<BM, BN, WARPS_M, WARPS_N, STAGES, kDual, kFp8>;
  // The attribute is per device: set once per instantiation on every device (ranks of a split
  // model call from threads of their own).
  static std::once_flag configured;
  std::call_once(configured, [&] {
    int devices = 0, current = 0;
    OPTIMATE_CUDA_CHECK(cudaGetDeviceCount(&devices));
    OPTIMATE_CUDA_CHECK(cudaGetDevice(&current));
    for (int d = 0; d < devices; ++d) {
      OPTIMATE_CUDA_CHECK(cudaSetDevice(d));
      OPTIMATE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
    }
    OPTIMATE_CUDA_CHECK(cudaSetDevice(current));
  });
  const dim3 grid(static_cast<unsigned>(p.max_tiles), static_cast<unsigned>((p.n + BN - 1) / BN));
  kernel<<<grid, kThreads, T::kSmemBytes, stream>>>(p);
  OPTIMATE_CUDA_CHECK_LAUNCH("moe_gemm_kernel");
}

template <bool kFp8>
void dispatch(const MoeGemmParams& p, cudaStream_t stream) {
  const bool dual = p.kind == MoeGemmKind::kSiluGateUp;
  if (p.tile_rows == kMoeSmallTileRows) {
    if (dual) launch<16, 32, 1, 4, 4, true, kFp8>(p, stream);
    else launch<16, 64, 1, 4, 4, false, kFp8>(p, stream);
  } else {
    if (dual) launch<64, 64, 2, 2, 3, true, kFp8>(p, stream);
    else launch<64, 128, 2, 2, 3, false, kFp8>(p, stream);
  }
}

}  // namespace

int64_t moe_tile_rows(int64_t num_pairs, int64_t num_experts) {
  return num_pairs > 16 * std::min(num_experts, num_pairs) ? kMoeLargeTileRows : kMoeSmallTileRows;
}

void moe_gemm(const MoeGemmParams& p, cudaStream_t stream) {
  const bool fp8 = p.w_fp8 != nullptr;
  OPTIMATE_SHAPE_CHECK(fp8 != (p.w != nullptr) && (!fp8 || p.w_scale != nullptr), "one of w, w_fp8 (+ w_scale)");
  OPTIMATE_SHAPE_CHECK(p.n % 8 == 0 && p.k % (fp8 ? 16 : 8) == 0 && p.n > 0 && p.k > 0, "n {}, k {}", p.n, p.k);
  OPTIMATE_SHAPE_CHECK(p.tile_rows == kMoeSmallTileRows || p.tile_rows == kMoeLargeTileRows, "tile_rows {}",
                       p.tile_rows);
  OPTIMATE_SHAPE_CHECK(p.kind == MoeGemmKind::kPlain || (p.pairs != nullptr && p.top_k >= 1), "gate/up needs pairs");
  OPTIMATE_SHAPE_CHECK(p.n < (int64_t{1} << 30) && p.k < (int64_t{1} << 30), "n {}, k {}", p.n, p.k);
  if (p.max_tiles == 0) return;
  if (fp8) dispatch<true>(p, stream);
  else dispatch<false>(p, stream);
}

}  // namespace optimate::cuda
