#include "backend/cpu/q8_linear.h"

#include <omp.h>

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
               int num_threads, CpuIsa isa, Q8Activations& scratch) {
  resize_q8_activations(scratch, num_tokens, w.cols);
  const int64_t out_dim = w.rows;
  // Below a thread hand-off's worth of multiply-adds the calling thread does it all.
  const int threads = num_tokens * w.cols * out_dim < (int64_t{1} << 16) ? 1 : std::max(1, num_threads);
#pragma omp parallel num_threads(threads)
  {
    const int64_t n = omp_get_num_threads(), id = omp_get_thread_num();
    quantize_activations(x, num_tokens * id / n, num_tokens * (id + 1) / n, scratch);
#pragma omp barrier
    // Whole cache lines of y per thread.
    const int64_t chunk = ((out_dim + n - 1) / n + 15) / 16 * 16;
    const int64_t row0 = std::min(out_dim, id * chunk);
    q8_linear_rows(scratch, w, y, out_dim, row0, std::min(out_dim, row0 + chunk) - row0, accumulate, isa);
  }
}

}  // namespace optimate::cpu
