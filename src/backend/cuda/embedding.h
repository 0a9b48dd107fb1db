// Token embedding lookup into the fp32 residual stream.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace optimate::cuda {

// residual[t] = table[token_ids[t] - vocab_begin] widened to fp32 for tokens in
// [vocab_begin, vocab_begin + vocab_rows), zeros for the others (a rank of a vocabulary split).
// table: [vocab_rows, hidden] bf16; token_ids: [num_tokens] int32 (validated by the caller
// against the whole vocabulary); residual: [num_tokens, hidden] fp32.
void embedding_gather(const __nv_bfloat16* table, const int32_t* token_ids, float* residual,
                      int64_t num_tokens, int64_t hidden, int64_t vocab_begin, int64_t vocab_rows,
                      cudaStream_t stream);

}  // namespace optimate::cuda
