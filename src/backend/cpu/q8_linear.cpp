#include "backend/cpu/q8_linear.h"

#include <algorithm>

#include "backend/cpu/q8_kernels.h"
#include "core/error.h"

namespace optimate::cpu {

void q8_linear_rows(const Q8Activations& x, const Q8Matrix& w, float* y, int64_t out_stride,
                    int64_t row0, int64_t rows, bool accumulate, CpuIsa isa) {
  OPTIMATE_CHECK(x.cols == w.cols, "activations of {} columns against a weight of {}", x.cols, w.cols);
  OPTIMATE_CHECK(row0 >= 0 && rows >= 0 && row0 + rows <= w.rows, "rows [{}, {}) of {}", row0, row0 + rows, w.rows);
  if (rows == 0 || x.rows == 0) return;
  const Q8Kernel kernel = q8_kernel(isa);
  // Token groups never straddle the activations' groups of 8 rows.
  const int64_t group = q8_max_tokens(isa);
  static_assert(kQ8Rows % 8 == 0 || kQ8Rows % 4 == 0);
  // Blocks of rows against every token group in turn: a group's activations (8 tokens of up to
  // a few thousand columns, ~3 bytes each) stay in L1 across the block instead of streaming
  // from L2 once per row.
  constexpr int64_t kBlockRows = 16;
  for (int64_t r0 = row0; r0 < row0 + rows; r0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, row0 + rows - r0);
    for (int64_t t0 = 0; t0 < x.rows; t0 += group)
      kernel(w, r0, n, x, t0, std::min(group, x.rows - t0), y + t0 * out_stride, out_stride, accumulate);
  }
}

void q8_linear(const float* x, const Q8Matrix& w, float* y, int64_t num_tokens, bool accumulate,
               CpuThreadPool& pool, CpuIsa isa, Q8Activations& scratch) {
  resize_q8_activations(scratch, num_tokens, w.cols);
  const int64_t out_dim = w.rows;
  // Below a chunk hand-off's worth of multiply-adds the calling thread does it all.
  if (num_tokens * w.cols * out_dim < (int64_t{1} << 16)) {
    quantize_activations(x, 0, num_tokens, scratch);
    q8_linear_rows(scratch, w, y, out_dim, 0, out_dim, accumulate, isa);
    return;
  }
  pool.run((num_tokens + kQ8Rows - 1) / kQ8Rows, [&](int64_t c, int) {
    quantize_activations(x, c * kQ8Rows, std::min(num_tokens, (c + 1) * kQ8Rows), scratch);
  });
  // Chunks of whole cache lines of y, small enough that a thread the OS is not running leaves
  // little for the others to wait on.
  constexpr int64_t kChunkRows = 64;
  pool.run((out_dim + kChunkRows - 1) / kChunkRows, [&](int64_t c, int) {
    const int64_t row0 = c * kChunkRows;
    q8_linear_rows(scratch, w, y, out_dim, row0, std::min(out_dim, row0 + kChunkRows) - row0, accumulate, isa);
  });
}

}  // namespace optimate::cpu
