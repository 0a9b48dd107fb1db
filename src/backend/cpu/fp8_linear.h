// --quantization fp8 on the CPU: the GPU's FP8 linear layers reproduced (model/fp8_quant.h), so
// `optimate perplexity` measures their quality on real weights without a GPU. Weights are
// rounded to bf16 first (what the GPU holds), then to e4m3 per output row; the products run on
// the fp32 kernels over the codes' exact values, with the row (and, for steps wider than
// kFp8GemvMaxRows, token) scales applied to each sum as the GPU's epilogue does. It saves no
// memory here: the point is the numbers.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/quantized_linear.h"

namespace optimate::cpu {

// Turns w (any storage) into FP8 form: w.f32 = the e4m3 codes' values [rows, cols], w.fp8_scales
// = the row scales; other storage cleared.
void quantize_matrix_fp8(CpuMatrix& w);

struct Fp8Scratch {
  std::vector<float> x;       // (tokens, cols) the activations' e4m3 values
  std::vector<float> scales;  // (tokens)
  std::vector<float> y;       // (tokens, rows) unscaled sums
  std::vector<uint8_t> codes;  // (cols) one row's codes
};

// y[t, r] = x[t, :] . dequant(w)[r, :] (+ y[t, r] when accumulate) for w in FP8 form.
// round_activations false keeps x as it is at every width, as the GPU's expert GEMMs do
// (moe_gemm.h: bf16 activations against the widened codes).
void fp8_linear(const float* x, const CpuMatrix& w, float* y, int64_t num_tokens, bool accumulate,
                int num_threads, Fp8Scratch& scratch, bool round_activations = true);

}  // namespace optimate::cpu
