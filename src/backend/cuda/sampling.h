// Token sampling on the GPU: greedy argmax, and temperature / top-k / top-p / min-p drawn with
// the host sampler's counter-based random numbers (sampling/rng.h), so a seeded request
// gets the same token from either backend for the same logits (sampling/sampler.h is the
// specification; rounding can move a top-p cut or a draw only when they fall within float
// rounding of a boundary).
//
// Two implementations of the same rule:
//  - sample_rows_fused: one kernel, one block per row, no sort. The top-k threshold is the
//    exact k-th largest value found by a radix select (three 11/11/10-bit passes over the
//    row); the top-p cut is a weighted radix select over the same keys; weights are summed in
//    32.32 fixed point, so sums do not depend on the order threads add them and the result is
//    bitwise reproducible.
//  - UnfusedSampler: the usual framework sequence (softmax to probabilities, a segmented sort
//    of the whole vocabulary, a cumulative sum, a cut, a draw), kept as the baseline the fused
//    kernel is measured against.
// Penalties and suppressed ids are not applied here: rows that need them go through the CPU
// sampler (make_sample_row refuses them).
#pragma once

#include <cmath>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/device_buffer.h"
#include "core/sampling_params.h"

namespace optimate::cuda {

// One row's parameters as the kernels read them (device memory, one per logits row).
struct GpuSampleRow {
  uint64_t seed = 0;
  uint64_t output_index = 0;   // i: tokens the request generated before this one
  float temperature = 1.0f;
  float top_p = 1.0f;          // 1: off
  float log_min_p = -INFINITY; // ln(min_p), computed on the host as the CPU sampler does; -inf: off
  int32_t top_k = 0;           // 0: off
  int32_t greedy = 0;          // argmax of the raw logits, lowest id on ties
  int32_t reserved = 0;
};

// Throws Error(kUnsupported) for penalties (repetition, presence, frequency), which only the
// CPU sampler applies, and Error(kInvalidArgument) for out-of-range values.
GpuSampleRow make_sample_row(const SamplingParams& params, uint64_t seed, int64_t output_index);

// logits: [num_rows, vocab] fp32; rows: [num_rows] (device); token_ids: [num_rows] int32.
// thresholds (optional, [num_rows]): the smallest kept value of logits / temperature, -inf when
// every id is kept, +inf for greedy rows; for tests.
void sample_rows_fused(const float* logits, const GpuSampleRow* rows, int32_t* token_ids,
                       float* thresholds, int64_t num_rows, int64_t vocab, cudaStream_t stream);

// The baseline: softmax, segmented sort of (probability, id), cumulative sum, cut, draw, each a
// separate launch through device memory. Holds its scratch for up to max_rows rows; thresholds
// as sample_rows_fused's (optional).
class UnfusedSampler {
 public:
  UnfusedSampler(int64_t max_rows, int64_t vocab);
  void sample(const float* logits, const GpuSampleRow* rows, int32_t* token_ids,
              float* thresholds, int64_t num_rows, cudaStream_t stream);

 private:
  int64_t max_rows_;
  int64_t vocab_;
  DeviceBuffer<float> probs_;         // (max_rows, vocab)
  DeviceBuffer<float> sorted_probs_;  // (max_rows, vocab) descending per row
  DeviceBuffer<int32_t> ids_;         // (max_rows, vocab) 0..vocab-1 per row
  DeviceBuffer<int32_t> sorted_ids_;  // (max_rows, vocab)
  DeviceBuffer<float> exclusive_sums_;// (max_rows, vocab) cumulative sum before each sorted entry
  DeviceBuffer<float> row_max_;       // (max_rows) max of logits / temperature
  DeviceBuffer<float> thresholds_;    // (max_rows) the cut, when the caller wants none back
  DeviceBuffer<int32_t> offsets_;     // (max_rows + 1) segment starts
  DeviceBuffer<uint8_t> sort_temp_;
  int hist_copies_ = 8;               // the draw kernel's shared state (sampling_select.cuh)
};

}  // namespace optimate::cuda
