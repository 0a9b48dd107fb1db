// Helpers for the GPU tests: device upload/download, seeded random bf16 data, and the
// atol + rtol * |ref| comparison that prints the first mismatches.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernel_paths.h"
#include "backend/cuda/kv_block.h"
#include "core/half.h"

namespace optimate::cuda::testing {

inline bool gpu_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define OPTIMATE_REQUIRE_GPU() \
  if (!::optimate::cuda::testing::gpu_available()) GTEST_SKIP() << "no CUDA device"

// FP8 weights and fp8 KV through the runner or cuBLASLt need compute capability 8.9 (the runner
// refuses them at start below it; kernel_paths.h).
inline bool gpu_has_fp8() { return device_kernel_paths().fp8; }
#define OPTIMATE_REQUIRE_FP8() \
  if (!::optimate::cuda::testing::gpu_has_fp8()) GTEST_SKIP() << "FP8 needs compute capability 8.9"

// bf16 data as the device sees it (bits) and as the CPU twin sees it (exact float values).
struct Bf16Data {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};

inline Bf16Data random_bf16(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Bf16Data d;
  d.bits.resize(n);
  d.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    d.bits[i] = f32_to_bf16(dist(rng));
    d.values[i] = bf16_to_f32(d.bits[i]);
  }
  return d;
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& host) {
  DeviceBuffer<T> d(host.size());
  if (!host.empty())
    OPTIMATE_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
std::vector<T> download(const T* device, size_t n) {
  OPTIMATE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> host(n);
  if (n) OPTIMATE_CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

inline std::vector<float> download_bf16(const uint16_t* device, size_t n) {
  const std::vector<uint16_t> bits = download(device, n);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(bits[i]);
  return out;
}

inline __nv_bfloat16* bf16_ptr(DeviceBuffer<uint16_t>& b) {
  return reinterpret_cast<__nv_bfloat16*>(b.get());
}

// A cache of bf16 blocks only, [blocks, hkv, bs, d] bf16 each for K and V, as the kernels take it.
inline KvArena bf16_arena(DeviceBuffer<uint16_t>& k, DeviceBuffer<uint16_t>& v, int64_t hkv, int64_t bs, int64_t d) {
  return {reinterpret_cast<uint8_t*>(k.get()), reinterpret_cast<uint8_t*>(v.get()), kv_bf16_block_bytes(hkv, bs, d),
          false};
}

// Poison value so an element the kernel failed to write stands out (bf16 of -777).
inline constexpr uint16_t kPoisonBf16 = 0xc442;

// Expects |got - ref| <= atol + rtol * |ref| everywhere (NaN never passes); prints the first
// mismatches with their index.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& ref, float atol,
                         float rtol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t bad = 0;
  double max_err = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= atol + rtol * std::fabs(ref[i]))) {
      if (bad < 8)
        ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " expected " << ref[i]
                      << " (|err| " << err << ")";
      ++bad;
    }
    if (err > max_err || std::isnan(err)) max_err = err;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << ref.size()
                     << " elements outside atol " << atol << " + rtol " << rtol
                     << " * |ref|; max |err| " << max_err;
}

}  // namespace optimate::cuda::testing
