// The random numbers of sampling, shared by the CPU sampler and the GPU sampling kernel.
//
// A request's output token i draws exactly one uniform number, and it depends only on the
// request's seed and i: u(seed, i) is the (i+1)-th output of a SplitMix64 stream seeded with
// `seed`, reduced to 24 bits so the fp32 value in [0, 1) is exact on every device. Nothing
// depends on the batch, the step or the thread that runs the row, which is what makes a seeded
// request produce the same tokens alone or batched, on CPU or GPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define OPTIMATE_HOST_DEVICE __host__ __device__
#else
#define OPTIMATE_HOST_DEVICE
#endif

namespace optimate {

OPTIMATE_HOST_DEVICE inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The (index+1)-th output of SplitMix64 seeded with `seed`.
OPTIMATE_HOST_DEVICE inline uint64_t sampling_random_bits(uint64_t seed, uint64_t index) {
  return splitmix64_mix(seed + (index + 1) * 0x9E3779B97F4A7C15ull);
}

// Uniform in [0, 1) with 24 random bits: k * 2^-24 is exact in fp32.
OPTIMATE_HOST_DEVICE inline float sampling_uniform(uint64_t seed, uint64_t index) {
  return static_cast<float>(sampling_random_bits(seed, index) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace optimate
