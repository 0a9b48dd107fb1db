// As in gemm.cpp, a row-major y[m, n] is cuBLASLt's column-major [n, m]: A = the weight codes
// seen as column-major [k, n] and transposed (FP8 on Hopper takes only this "TN" form), B = the
// activation codes as column-major [k, m]. Outer-vector scaling multiplies D's element (i, j)
// by A's scale i (the weight row) and B's scale j (the token): exactly the dequantization.
#include "backend/cuda/fp8_gemm.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_quantize.h"
#include "backend/cuda/gemv.h"
#include "core/error.h"
#include "model/fp8_quant.h"

namespace optimate::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr size_t kSumFloats = size_t{16} << 20;  // 64 MiB of fp32 sums per chunk of rows


template <typename T>
void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  OPTIMATE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

}  // namespace

Fp8Gemm::Fp8Gemm(int64_t max_rows, int64_t max_k)
    : max_rows_(max_rows),
      max_k_(max_k),
      workspace_(kWorkspaceBytes),
      x_codes_(static_cast<size_t>(max_rows * max_k)),
      x_scales_(static_cast<size_t>(max_rows)),
      sums_(kSumFloats) {
  OPTIMATE_SHAPE_CHECK(max_rows > 0 && max_k > 0, "max_rows {} max_k {}", max_rows, max_k);
  OPTIMATE_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Fp8Gemm::~Fp8Gemm() {
  for (auto& [key, p] : plans_) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  }
  if (handle_) cublasLtDestroy(handle_);
}

int64_t Fp8Gemm::device_bytes(int64_t max_rows, int64_t max_k) {
  return static_cast<int64_t>(kWorkspaceBytes + kSumFloats * 4) + max_rows * max_k + max_rows * 4;
}

Fp8Gemm::Plan& Fp8Gemm::plan(int64_t m, int64_t n, int64_t k, GemmOutput out, bool bias, bool exact,
                             bool outer) {
  if (!exact) m = gemm_algo_rows(m);
  const Key key{m, n, k, static_cast<int>(out), bias, exact, outer};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;

  Plan p;
  p.rows = m;
  const cudaDataType_t out_type = out == GemmOutput::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  OPTIMATE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_attr(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  bool accepted = true;  // a cuBLASLt without outer-vector scaling refuses the mode
  if (outer) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    for (auto attr : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE})
      accepted = accepted && cublasLtMatmulDescSetAttribute(p.desc, attr, &mode, sizeof(mode)) == CUBLAS_STATUS_SUCCESS;
    if (bias) {
      set_attr(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
      set_attr(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
    }
  }
  OPTIMATE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, k, n, k));
  OPTIMATE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, k, m, k));
  OPTIMATE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_type, n, m, n));

  if (!accepted) return plans_.emplace(key, p).first->second;  // usable stays false

  cublasLtMatmulPreference_t pref = nullptr;
  OPTIMATE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = workspace_.bytes();
  OPTIMATE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c,
                                                               pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.usable = status == CUBLAS_STATUS_SUCCESS && found > 0;
  if (p.usable) p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

bool Fp8Gemm::matmul(const Plan& p, const void* a, const void* b, void* d, cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t status = cublasLtMatmul(handle_, p.desc, &alpha, a, p.a, b, p.b, &beta, d, p.c, d,
                                               p.c, &p.algo, workspace_.get(), workspace_.bytes(), stream);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) return false;
  OPTIMATE_CUBLAS_CHECK(status);
  return true;
}

bool Fp8Gemm::run_outer(const Fp8Weight& w, const __nv_bfloat16* bias, void* y, GemmOutput out, int64_t m,
                        int64_t n, int64_t k, cudaStream_t stream) {
  for (bool exact : {false, true}) {
    if (exact && gemm_algo_rows(m) == m) break;
    Plan& p = plan(m, n, k, out, bias != nullptr, exact, true);
    if (!p.usable) continue;
    if (p.rows != m) {
      gemm_set_cols(p.b, m);
      gemm_set_cols(p.c, m);
      p.rows = m;
    }
    set_attr(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w.scales));
    set_attr(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scales_.get()));
    if (bias) set_attr(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias));
    if (matmul(p, w.codes, x_codes_.get(), y, stream)) return true;
    p.usable = false;  // this m's algorithm refused the call: ask no more
  }
  return false;
}

void Fp8Gemm::run_epilogue(const Fp8Weight& w, const __nv_bfloat16* bias, void* y, GemmOutput out, int64_t m,
                           int64_t n, int64_t k, cudaStream_t stream) {
  const int64_t ld = n;
  OPTIMATE_SHAPE_CHECK(ld <= static_cast<int64_t>(kSumFloats), "n {} too wide for the FP8 sums", n);
  const int64_t chunk = std::min<int64_t>(m, static_cast<int64_t>(kSumFloats) / ld);
  const int64_t out_bytes = out == GemmOutput::kF32 ? 4 : 2;
  for (int64_t r0 = 0; r0 < m; r0 += chunk) {
    const int64_t rows = std::min(chunk, m - r0);
    const uint8_t* b = x_codes_.get() + r0 * k;
    bool done = false;
    for (bool exact : {false, true}) {
      if (exact && gemm_algo_rows(rows) == rows) break;
      Plan& p = plan(rows, n, k, GemmOutput::kF32, false, exact, false);
      if (!p.usable) continue;
      if (p.rows != rows) {
        gemm_set_cols(p.b, rows);
        gemm_set_cols(p.c, rows);
        p.rows = rows;
      }
      if ((done = matmul(p, w.codes, b, sums_.get(), stream))) break;
    }
    if (!done)
      fail(ErrorCode::kUnsupported, "cuBLASLt has no FP8 algorithm for m={} n={} k={}", rows, n, k);
    fp8_scale_outputs(sums_.get(), ld, w.scales, x_scales_.get() + r0, bias,
                      static_cast<uint8_t*>(y) + r0 * n * out_bytes, out == GemmOutput::kF32, rows, n, stream);
  }
}

void Fp8Gemm::linear(const __nv_bfloat16* x, const Fp8Weight& w, const __nv_bfloat16* bias, void* y,
                     GemmOutput out, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(m >= 0 && n > 0 && k > 0 && k % kFp8ColsMultiple == 0,
                       "m {} n {} k {} (k a multiple of {})", m, n, k, kFp8ColsMultiple);
  OPTIMATE_SHAPE_CHECK(x && w.codes && w.scales && y, "null operand");
  if (m == 0) return;
  const bool gemv_rows = path_ == Fp8GemmPath::kGemv ? m <= kGemvMaxRows
                                                     : path_ == Fp8GemmPath::kAuto && !fp8_rounds_activations(m, n);
  if (gemv_rows) {
    const int64_t out_bytes = out == GemmOutput::kF32 ? 4 : 2;
    for (int64_t r0 = 0; r0 < m; r0 += kGemvMaxRows) {
      const int64_t rows = std::min<int64_t>(kGemvMaxRows, m - r0);
      gemv_linear_fp8(x + r0 * k, w.codes, w.scales, bias, static_cast<uint8_t*>(y) + r0 * n * out_bytes,
                      out == GemmOutput::kF32, rows, n, k, stream);
    }
    return;
  }
  check_gemm_shape(m, n, k);
  quantize_fp8_rows(x, m, k, activations().codes, x_scales_.get(), stream);
  run_gemm(w, bias, y, out, m, n, k, stream);
}

Fp8Activations Fp8Gemm::activations() const {
  return {reinterpret_cast<__nv_fp8_e4m3*>(x_codes_.get()), x_scales_.get()};
}

void Fp8Gemm::linear_quantized(const Fp8Weight& w, const __nv_bfloat16* bias, void* y, GemmOutput out, int64_t m,
                               int64_t n, int64_t k, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(m >= 0 && n > 0 && k > 0 && k % kFp8ColsMultiple == 0,
                       "m {} n {} k {} (k a multiple of {})", m, n, k, kFp8ColsMultiple);
  OPTIMATE_SHAPE_CHECK(w.codes && w.scales && y, "null operand");
  OPTIMATE_SHAPE_CHECK(path_ != Fp8GemmPath::kGemv && (path_ != Fp8GemmPath::kAuto || fp8_rounds_activations(m, n)),
                       "m {} n {}: this linear does not round its activations to FP8", m, n);
  if (m == 0) return;
  check_gemm_shape(m, n, k);
  run_gemm(w, bias, y, out, m, n, k, stream);
}

void Fp8Gemm::check_gemm_shape(int64_t m, int64_t n, int64_t k) const {
  OPTIMATE_SHAPE_CHECK(n % 16 == 0, "n {}: cuBLASLt's FP8 kernels take widths in multiples of 16", n);
  OPTIMATE_SHAPE_CHECK(m <= max_rows_ && k <= max_k_, "m {} k {} past the FP8 scratch of {} x {}", m, k,
                       max_rows_, max_k_);
}

void Fp8Gemm::run_gemm(const Fp8Weight& w, const __nv_bfloat16* bias, void* y, GemmOutput out, int64_t m, int64_t n,
                       int64_t k, cudaStream_t stream) {
  // cuBLASLt's bias epilogue takes a bias of the output type, so a bf16 bias into fp32 goes
  // through the scale epilogue.
  last_outer_ = path_ != Fp8GemmPath::kScaleEpilogue && !(bias && out == GemmOutput::kF32) &&
                run_outer(w, bias, y, out, m, n, k, stream);
  if (!last_outer_) run_epilogue(w, bias, y, out, m, n, k, stream);
}

}  // namespace optimate::cuda
