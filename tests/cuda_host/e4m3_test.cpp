// The kernels' e4m3 to fp16 conversion below compute capability 8.9 (e4m3.cuh), against
// cuda_fp8.h's own conversion (NVIDIA's host emulation of cvt.rn.f16x2.e4m3x2), for every code.
#include "backend/cuda/e4m3.cuh"

#include <gtest/gtest.h>

namespace optimate::cuda {
namespace {

TEST(E4m3, EveryCodeConvertsAsCudaFp8Does) {
  for (uint32_t code = 0; code < 256; ++code) {
    const __half_raw want = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
    EXPECT_EQ(e4m3_to_half_bits_emulated(code), want.x) << "code 0x" << std::hex << code;
  }
}

}  // namespace
}  // namespace optimate::cuda
