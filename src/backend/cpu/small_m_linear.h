// y = x . w^T for a few token rows (2 to kSmallMaxTokens): one pass over each weight row serves
// every token. OpenBLAS's sgemm at these sizes reads the weights about 1.6 times as long as one
// sgemv does, so a decode step of 2-8 sequences cost more per token than batches of one.
#pragma once

#include <cstdint>

namespace optimate::cpu {

inline constexpr int64_t kSmallMaxTokens = 8;

// Rows [row0, row0 + rows) of y (num_tokens x out_dim, row-major); x is num_tokens x in_dim and
// w is out_dim x in_dim, both row-major. accumulate: y += x . w^T, else y = x . w^T.
void small_m_linear(const float* x, const float* w, float* y, int64_t num_tokens, int64_t in_dim,
                    int64_t out_dim, int64_t row0, int64_t rows, bool accumulate);

}  // namespace optimate::cpu
