// cuBLASLt is column-major; a row-major y[m, n] is a column-major [n, m] matrix, so each call
// computes y^T = w . x^T: A = w seen as column-major [k, n] and transposed, B = x seen as
// column-major [k, m]. The bias epilogue adds bias[n] along the rows of that column-major
// result, which is each output row's n features.
#include "backend/cuda/gemm.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "core/error.h"

namespace optimate::cuda {

Gemm::Gemm(size_t workspace_bytes) : workspace_(workspace_bytes) {
  OPTIMATE_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
  }
  if (handle_) cublasLtDestroy(handle_);
}

int64_t gemm_algo_rows(int64_t m) {
  const int64_t step = m <= 16 ? 1 : m <= 256 ? 16 : m <= 2048 ? 64 : 256;
  return (m + step - 1) / step * step;
}

void gemm_set_cols(cublasLtMatrixLayout_t layout, int64_t cols) {
  const uint64_t v = static_cast<uint64_t>(cols);
  OPTIMATE_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_COLS, &v, sizeof(v)));
}

Gemm::Plan& Gemm::plan(int64_t m, int64_t n, int64_t k, GemmOutput out, bool bias, bool exact) {
  if (!exact) m = gemm_algo_rows(m);
  const Key key{m, n, k, static_cast<int>(out), bias, exact};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;

  Plan p;
  p.rows = m;
  const cudaDataType_t out_type = out == GemmOutput::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  OPTIMATE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  OPTIMATE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                       &trans_a, sizeof(trans_a)));
  OPTIMATE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                       &trans_b, sizeof(trans_b)));
  if (bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_16BF;
    OPTIMATE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                         &epilogue, sizeof(epilogue)));
    OPTIMATE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  OPTIMATE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, n, k));
  OPTIMATE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, m, k));
  OPTIMATE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_type, n, m, n));

  cublasLtMatmulPreference_t pref = nullptr;
  OPTIMATE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = workspace_.bytes();
  OPTIMATE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c,
                                                               p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
    fail(ErrorCode::kUnsupported, "cuBLASLt has no bf16 algorithm for m={} n={} k={} (status {})",
         m, n, k, static_cast<int>(status));
  }
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Gemm::linear(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias,
                  void* y, GemmOutput out, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  OPTIMATE_SHAPE_CHECK(m >= 0 && n > 0 && k > 0, "m {} n {} k {}", m, n, k);
  OPTIMATE_SHAPE_CHECK(x && w && y, "null operand");
  if (m == 0) return;
  // cuBLASLt's bias epilogue takes a bias of the output type, so a bf16 bias into an fp32
  // output stays on the small-m kernel wherever it can.
  const bool bias_into_f32 = bias && out == GemmOutput::kF32;
  if (k % 8 == 0 && use_gemv_ && (m <= kGemvFasterRows || (bias_into_f32 && m <= kGemvMaxRows))) {
    gemv_linear(x, w, bias, y, out == GemmOutput::kF32, m, n, k, stream);
    return;
  }
  const float alpha = 1.0f, beta = 0.0f;
  for (bool exact : {false, true}) {
    Plan& p = plan(m, n, k, out, bias != nullptr, exact);
    if (p.rows != m) {
      gemm_set_cols(p.b, m);
      gemm_set_cols(p.c, m);
      p.rows = m;
    }
    if (bias) {
      OPTIMATE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    const cublasStatus_t status = cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, y,
                                                 p.c, y, p.c, &p.algo, workspace_.get(),
                                                 workspace_.bytes(), stream);
    // The bucket's algorithm may not take this m; the heuristic for the exact m then decides.
    if (status == CUBLAS_STATUS_NOT_SUPPORTED && !exact && gemm_algo_rows(m) != m) continue;
    OPTIMATE_CUBLAS_CHECK(status);
    return;
  }
}

}  // namespace optimate::cuda
