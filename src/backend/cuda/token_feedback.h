// The sampled token fed back on the device: a step launched before the host has read the one
// before it names that step's draws as token_from_last_launch(k) (backend/model_runner.h); this
// kernel replaces each such id in the step's token ids with row k of the last draws, in stream
// order after they were drawn and before the embedding reads them.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace optimate::cuda {

// token_ids[0, n): every id < 0 becomes drawn[-1 - id].
void take_fed_back_tokens(int32_t* token_ids, int64_t n, const int32_t* drawn, cudaStream_t stream);

}  // namespace optimate::cuda
