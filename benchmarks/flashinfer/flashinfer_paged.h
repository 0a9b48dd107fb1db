// FlashInfer's batch attention over the project's paged KV cache, as is: a layer's K and V
// arenas are FlashInfer's HND pages ([slot][kv_heads][block_size][head_dim], bf16) with
// separate K and V pointers, and a block table becomes its CSR page list (indptr, page ids,
// last page's length), built on the host. One call covers prefill chunks (causal, over the
// cached prefix and the chunk) and decode rows (a chunk of one token): FlashInfer's tensor-core
// path, the one vLLM and SGLang take for grouped-query attention. Kept apart from the
// project's kernels: only cuda_flashinfer_bench builds it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace optimate::cuda::bench {

// One step's sequences: query rows [qo_indptr[i], qo_indptr[i+1]) are the last rows of
// sequence i, whose keys are kv_len[i] tokens in the pages table[i * max_pages ...].
struct FlashInferBatch {
  std::vector<int32_t> qo_indptr;  // [batch + 1]
  std::vector<int32_t> kv_len;     // [batch]
  std::vector<int32_t> table;      // [batch, max_pages] slot ids
  int64_t max_pages = 0;
};

// The adapter: each sequence's block-table row as FlashInfer's page list (CSR: kv_indptr
// [batch + 1] into the page ids), with each sequence's last page length.
struct FlashInferPages {
  std::vector<int32_t> kv_indptr{0}, indices, last_page_len;
};
FlashInferPages flashinfer_pages(const FlashInferBatch& batch, int64_t page_size);

// Throws std::runtime_error naming `what` unless `status` is cudaSuccess.
void flashinfer_check(cudaError_t status, const char* what);

// A device copy of `h` (at least one element), freed with cudaFree.
template <typename T>
T* flashinfer_upload(const std::vector<T>& h) {
  T* d = nullptr;
  flashinfer_check(cudaMalloc(&d, std::max<size_t>(1, h.size()) * sizeof(T)), "cudaMalloc");
  flashinfer_check(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

struct FlashInferShape {
  int64_t num_qo_heads = 32, num_kv_heads = 8, head_dim = 128, page_size = 16;
  int64_t q_row_stride = 0;  // elements between token rows of q (fused QKV rows)
};

// The plan (FlashInfer's host-side split of the work, and its device copy) for one batch;
// run() replays it over any layer's arenas, so a CUDA graph can capture the layers' calls.
class FlashInferPrefill {
 public:
  FlashInferPrefill(const FlashInferShape& shape, const FlashInferBatch& batch, cudaStream_t stream);
  ~FlashInferPrefill();
  FlashInferPrefill(const FlashInferPrefill&) = delete;
  FlashInferPrefill& operator=(const FlashInferPrefill&) = delete;
  // out: [rows, num_qo_heads, head_dim].
  void run(const __nv_bfloat16* q, const __nv_bfloat16* k_arena, const __nv_bfloat16* v_arena,
           __nv_bfloat16* out, cudaStream_t stream) const;
  int64_t cta_tile_q() const { return cta_tile_q_; }
  bool split_kv() const { return split_kv_; }

 private:
  FlashInferShape shape_;
  int64_t batch_ = 0, rows_ = 0, cta_tile_q_ = 0;
  bool split_kv_ = false;
  std::vector<int64_t> plan_;  // FlashInfer's PrefillPlanInfo, as its ToVector() writes it
  void* float_ws_ = nullptr;
  void* int_ws_ = nullptr;
  void* pinned_ws_ = nullptr;
  int32_t* d_qo_indptr_ = nullptr;
  int32_t* d_kv_indptr_ = nullptr;
  int32_t* d_kv_indices_ = nullptr;
  int32_t* d_last_page_len_ = nullptr;
};

}  // namespace optimate::cuda::bench
