#include "flashinfer_paged.h"

#include <stdexcept>
#include <string>

#include <flashinfer/attention/scheduler.cuh>

#include "backend/cuda/cuda_check.h"
#include "flashinfer_prefill_kernel.cuh"

namespace optimate::cuda::bench {

void flashinfer_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

FlashInferPages flashinfer_pages(const FlashInferBatch& b, int64_t page_size) {
  FlashInferPages out;
  for (size_t i = 0; i < b.kv_len.size(); ++i) {
    const int64_t pages = (b.kv_len[i] + page_size - 1) / page_size;
    const auto row = b.table.begin() + static_cast<int64_t>(i) * b.max_pages;
    out.indices.insert(out.indices.end(), row, row + pages);
    out.kv_indptr.push_back(static_cast<int32_t>(out.indices.size()));
    out.last_page_len.push_back(static_cast<int32_t>(b.kv_len[i] - (pages - 1) * page_size));
  }
  return out;
}

FlashInferPrefill::FlashInferPrefill(const FlashInferShape& shape, const FlashInferBatch& b, cudaStream_t stream)
    : shape_(shape) {
  if (shape.head_dim != kFiHeadDim) throw std::invalid_argument("the benchmark instantiates head_dim 128 only");
  batch_ = static_cast<int64_t>(b.kv_len.size());
  rows_ = b.qo_indptr.back();
  FlashInferPages pages = flashinfer_pages(b, shape.page_size);
  std::vector<int32_t>& kv_indptr = pages.kv_indptr;
  std::vector<int32_t> qo_indptr = b.qo_indptr;
  size_t float_bytes = 0, int_bytes = 0;
  flashinfer_check(flashinfer::PrefillPlanWorkspaceSize<int32_t>(
            float_bytes, int_bytes, qo_indptr.data(), kv_indptr.data(), rows_, batch_, shape.num_qo_heads,
            shape.num_kv_heads, kFiHeadDim, kFiHeadDim, shape.page_size, /*enable_cuda_graph=*/false,
            sizeof(__nv_bfloat16), /*window_left=*/-1, /*fixed_split_size=*/-1, /*disable_split_kv=*/false,
            /*num_colocated_ctas=*/0, /*uniform_q_len=*/0, stream),
        "PrefillPlanWorkspaceSize");
  float_bytes = std::max<size_t>(float_bytes, 256);
  int_bytes = std::max<size_t>(int_bytes, 256);
  OPTIMATE_CUDA_CHECK(cudaMalloc(&float_ws_, float_bytes));
  OPTIMATE_CUDA_CHECK(cudaMalloc(&int_ws_, int_bytes));
  OPTIMATE_CUDA_CHECK(cudaMallocHost(&pinned_ws_, int_bytes));
  flashinfer::PrefillPlanInfo info;
  flashinfer_check(flashinfer::PrefillPlan<int32_t>(float_ws_, float_bytes, int_ws_, pinned_ws_, int_bytes, info,
                                         qo_indptr.data(), kv_indptr.data(), rows_, batch_, shape.num_qo_heads,
                                         shape.num_kv_heads, kFiHeadDim, kFiHeadDim, shape.page_size,
                                         /*enable_cuda_graph=*/false, sizeof(__nv_bfloat16), -1, -1, false, 0, 0,
                                         stream),
        "PrefillPlan");
  OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(stream));
  plan_ = info.ToVector();
  cta_tile_q_ = info.cta_tile_q;
  split_kv_ = info.split_kv;
  d_qo_indptr_ = flashinfer_upload(qo_indptr);
  d_kv_indptr_ = flashinfer_upload(kv_indptr);
  d_kv_indices_ = flashinfer_upload(pages.indices);
  d_last_page_len_ = flashinfer_upload(pages.last_page_len);
}

FlashInferPrefill::~FlashInferPrefill() {
  cudaFree(float_ws_);
  cudaFree(int_ws_);
  cudaFreeHost(pinned_ws_);
  cudaFree(d_qo_indptr_);
  cudaFree(d_kv_indptr_);
  cudaFree(d_kv_indices_);
  cudaFree(d_last_page_len_);
}

void FlashInferPrefill::run(const __nv_bfloat16* q, const __nv_bfloat16* k_arena, const __nv_bfloat16* v_arena,
                            __nv_bfloat16* out, cudaStream_t stream) const {
  using flashinfer::GetPtrFromBaseOffset;
  flashinfer::PrefillPlanInfo info;
  info.FromVector(plan_);
  FiParams p;
  p.q = const_cast<__nv_bfloat16*>(q);
  p.paged_kv = flashinfer::paged_kv_t<__nv_bfloat16, int32_t>(
      shape_.num_kv_heads, shape_.page_size, kFiHeadDim, batch_, flashinfer::QKVLayout::kHND,
      const_cast<__nv_bfloat16*>(k_arena), const_cast<__nv_bfloat16*>(v_arena), d_kv_indices_, d_kv_indptr_,
      d_last_page_len_);
  p.q_indptr = d_qo_indptr_;
  p.o = out;
  p.num_qo_heads = shape_.num_qo_heads;
  p.group_size = flashinfer::uint_fastdiv(shape_.num_qo_heads / shape_.num_kv_heads);
  p.q_stride_n = static_cast<int32_t>(shape_.q_row_stride);
  p.q_stride_h = kFiHeadDim;
  p.window_left = -1;
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(kFiHeadDim));
  p.request_indices = GetPtrFromBaseOffset<int32_t>(int_ws_, info.request_indices_offset);
  p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(int_ws_, info.qo_tile_indices_offset);
  p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(int_ws_, info.kv_tile_indices_offset);
  p.o_indptr = GetPtrFromBaseOffset<int32_t>(int_ws_, info.o_indptr_offset);
  p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(int_ws_, info.kv_chunk_size_ptr_offset);
  __nv_bfloat16* tmp_v = nullptr;
  float* tmp_s = nullptr;
  if (info.split_kv) {
    p.merge_indptr = GetPtrFromBaseOffset<int32_t>(int_ws_, info.merge_indptr_offset);
    tmp_v = GetPtrFromBaseOffset<__nv_bfloat16>(float_ws_, info.v_offset);
    tmp_s = GetPtrFromBaseOffset<float>(float_ws_, info.s_offset);
  }
  p.padded_batch_size = static_cast<uint32_t>(info.padded_batch_size);
  p.max_total_num_rows = static_cast<uint32_t>(info.total_num_rows);
  p.partition_kv = info.split_kv;
  cudaError_t status = cudaErrorInvalidValue;
  switch (info.cta_tile_q) {
    case 16: status = flashinfer_prefill_tile<16>(p, tmp_v, tmp_s, stream); break;
    case 64: status = flashinfer_prefill_tile<64>(p, tmp_v, tmp_s, stream); break;
    case 128: status = flashinfer_prefill_tile<128>(p, tmp_v, tmp_s, stream); break;
    default: throw std::runtime_error("FlashInfer planned a query tile of " + std::to_string(info.cta_tile_q));
  }
  flashinfer_check(status, "BatchPrefillWithPagedKVCacheDispatched");
}

}  // namespace optimate::cuda::bench
