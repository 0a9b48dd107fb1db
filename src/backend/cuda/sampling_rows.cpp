#include <cmath>

#include "backend/cuda/sampling.h"
#include "core/error.h"

namespace optimate::cuda {

GpuSampleRow make_sample_row(const SamplingParams& params, uint64_t seed, int64_t output_index) {
  if (params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
      params.frequency_penalty != 0.0f)
    fail(ErrorCode::kUnsupported,
         "the GPU sampler does not apply penalties (repetition_penalty {}, presence_penalty {}, "
         "frequency_penalty {}); sample this row on the CPU",
         params.repetition_penalty, params.presence_penalty, params.frequency_penalty);
  if (output_index < 0) fail(ErrorCode::kInvalidArgument, "output_index {} is negative", output_index);
  GpuSampleRow row;
  row.seed = seed;
  row.output_index = static_cast<uint64_t>(output_index);
  row.greedy = params.greedy() ? 1 : 0;
  if (row.greedy) return row;
  if (!(params.temperature > 0.0f) || !std::isfinite(params.temperature))
    fail(ErrorCode::kInvalidArgument, "temperature {} must be positive and finite", params.temperature);
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f))
    fail(ErrorCode::kInvalidArgument, "top_p {} must be in (0, 1]", params.top_p);
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f))
    fail(ErrorCode::kInvalidArgument, "min_p {} must be in [0, 1]", params.min_p);
  row.temperature = params.temperature;
  row.top_p = params.top_p;
  row.top_k = params.top_k > 0 ? static_cast<int32_t>(std::min<int64_t>(params.top_k, INT32_MAX)) : 0;
  // The same float expression as the CPU sampler's, so min-p thresholds agree bit for bit.
  row.log_min_p = params.min_p > 0.0f ? std::log(params.min_p) : -INFINITY;
  return row;
}

}  // namespace optimate::cuda
