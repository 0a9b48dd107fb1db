// cuBLASLt, loaded when the CUDA backend first calls it instead of when the process starts.
//
// Linking libcublasLt put it in every process of a CUDA build, the CPU server included, and the
// loader leaves about 61 MB of its pages resident there. The build links none of it: these
// definitions of the cuBLASLt functions the backend calls (gemm.cpp) stand in for the library's
// and forward to it, opening it on the first call. Each signature is checked against the
// toolkit's header, which declares them.
#include <dlfcn.h>

#include <cublasLt.h>

#include <mutex>
#include <string>

#include "core/error.h"

namespace optimate::cuda {
namespace {

const std::string& library_name() {
  static const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  return name;
}

void* library() {
  static void* handle = [] {
    void* h = dlopen(library_name().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* why = dlerror();
      fail(ErrorCode::kUnsupported, "the CUDA backend needs {}: {}", library_name(),
           why ? why : "it cannot be loaded");
    }
    return h;
  }();
  return handle;
}

// The library's own definition of `Fn`, resolved once.
template <auto& Fn>
auto real(const char* name) {
  using Ptr = decltype(&Fn);
  static const Ptr fn = [name] {
    auto* p = reinterpret_cast<Ptr>(dlsym(library(), name));
    if (!p) fail(ErrorCode::kUnsupported, "{} has no {}", library_name(), name);
    return p;
  }();
  return fn;
}

}  // namespace
}  // namespace optimate::cuda

#define OPTIMATE_CUBLASLT(name) ::optimate::cuda::real<name>(#name)

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  return OPTIMATE_CUBLASLT(cublasLtCreate)(handle);
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  return OPTIMATE_CUBLASLT(cublasLtDestroy)(handle);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                           const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                                           cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                                           cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
  return OPTIMATE_CUBLASLT(cublasLtMatmul)(handle, desc, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d, d_desc,
                                           algo, workspace, workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  return OPTIMATE_CUBLASLT(cublasLtMatmulDescCreate)(desc, compute, scale);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return OPTIMATE_CUBLASLT(cublasLtMatmulDescDestroy)(desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t bytes) {
  return OPTIMATE_CUBLASLT(cublasLtMatmulDescSetAttribute)(desc, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  return OPTIMATE_CUBLASLT(cublasLtMatrixLayoutCreate)(layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return OPTIMATE_CUBLASLT(cublasLtMatrixLayoutDestroy)(layout);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                             cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                             size_t bytes) {
  return OPTIMATE_CUBLASLT(cublasLtMatrixLayoutSetAttribute)(layout, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return OPTIMATE_CUBLASLT(cublasLtMatmulPreferenceCreate)(pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return OPTIMATE_CUBLASLT(cublasLtMatmulPreferenceDestroy)(pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t bytes) {
  return OPTIMATE_CUBLASLT(cublasLtMatmulPreferenceSetAttribute)(pref, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                           cublasLtMatrixLayout_t a_desc,
                                                           cublasLtMatrixLayout_t b_desc,
                                                           cublasLtMatrixLayout_t c_desc,
                                                           cublasLtMatrixLayout_t d_desc,
                                                           cublasLtMatmulPreference_t pref, int requested,
                                                           cublasLtMatmulHeuristicResult_t results[], int* returned) {
  return OPTIMATE_CUBLASLT(cublasLtMatmulAlgoGetHeuristic)(handle, desc, a_desc, b_desc, c_desc, d_desc, pref,
                                                           requested, results, returned);
}

}  // extern "C"
