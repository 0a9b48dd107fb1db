#include "flashinfer_sm90.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <cutlass/numeric_types.h>
#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#include <flashinfer/attention/mask.cuh>
#include <flashinfer/attention/scheduler.cuh>

#include "backend/cuda/cuda_check.h"

namespace optimate::cuda::bench {
namespace {

constexpr uint32_t kHeadDim = 128;
using Bf16 = cutlass::bfloat16_t;
using Params = flashinfer::BatchPrefillPagedParams<Bf16, Bf16, Bf16, int32_t>;

// The plan's integer workspace: its work list holds at most (rows / 128 + batch) tiles per
// query head, seven int32 arrays of them and the multiprocessors' offsets, each 16-byte aligned.
size_t int_workspace_bytes(int64_t rows, int64_t batch, int64_t heads) {
  const size_t works = static_cast<size_t>((rows / 128 + batch + 1) * heads);
  return 8 * (works * 4 + 16) + 4096 * 4;
}

}  // namespace

FlashInferPrefillSm90::FlashInferPrefillSm90(const FlashInferShape& shape, const FlashInferBatch& b,
                                             cudaStream_t stream)
    : shape_(shape) {
  if (shape.head_dim != kHeadDim) throw std::invalid_argument("the benchmark instantiates head_dim 128 only");
  batch_ = static_cast<int64_t>(b.kv_len.size());
  rows_ = b.qo_indptr.back();
  FlashInferPages pages = flashinfer_pages(b, shape.page_size);
  std::vector<int32_t> qo_indptr = b.qo_indptr, kv_len = b.kv_len;
  const size_t int_bytes = int_workspace_bytes(rows_, batch_, shape.num_qo_heads);
  OPTIMATE_CUDA_CHECK(cudaMalloc(&int_ws_, int_bytes));
  OPTIMATE_CUDA_CHECK(cudaMallocHost(&pinned_ws_, int_bytes));
  flashinfer::PrefillPlanSM90Info info;
  // The float workspace is unused by the SM90 plan (it splits no KV): none is passed.
  flashinfer_check(
      flashinfer::PrefillSM90Plan<int32_t>(nullptr, 0, int_ws_, pinned_ws_, int_bytes, info, qo_indptr.data(),
                                           pages.kv_indptr.data(), kv_len.data(), static_cast<uint32_t>(rows_),
                                           static_cast<uint32_t>(batch_), shape.num_qo_heads, shape.num_kv_heads,
                                           kHeadDim, kHeadDim, shape.page_size, /*causal=*/true,
                                           /*enable_cuda_graph=*/false, sizeof(__nv_bfloat16), stream),
      "PrefillSM90Plan");
  OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (info.same_schedule_for_all_heads)
    throw std::runtime_error(
        "FlashInfer's SM90 plan chose one schedule for all heads, which the benchmark does not build");
  plan_ = info.ToVector();
  d_kv_indices_ = flashinfer_upload(pages.indices);
}

FlashInferPrefillSm90::~FlashInferPrefillSm90() {
  cudaFree(int_ws_);
  cudaFreeHost(pinned_ws_);
  cudaFree(d_kv_indices_);
}

void FlashInferPrefillSm90::run(const __nv_bfloat16* q, const __nv_bfloat16* k_arena, const __nv_bfloat16* v_arena,
                                __nv_bfloat16* out, cudaStream_t stream) const {
  using flashinfer::GetPtrFromBaseOffset;
  flashinfer::PrefillPlanSM90Info info;
  info.FromVector(plan_);
  const int64_t page = shape_.page_size, heads = shape_.num_qo_heads, kv_heads = shape_.num_kv_heads;
  Params p{};
  p.q_ptr = reinterpret_cast<Bf16*>(const_cast<__nv_bfloat16*>(q));
  p.k_ptr = reinterpret_cast<Bf16*>(const_cast<__nv_bfloat16*>(k_arena));
  p.v_ptr = reinterpret_cast<Bf16*>(const_cast<__nv_bfloat16*>(v_arena));
  p.o_ptr = reinterpret_cast<Bf16*>(out);
  p.lse_ptr = nullptr;
  p.q_stride_n = shape_.q_row_stride;
  p.q_stride_h = kHeadDim;
  p.o_stride_n = heads * kHeadDim;
  p.o_stride_h = kHeadDim;
  // HND pages: [slot][kv head][token in the block][dim], K and V alike.
  p.k_stride_h = p.v_stride_h = page * kHeadDim;
  p.k_stride_n = p.v_stride_n = kHeadDim;
  p.k_page_stride = p.v_page_stride = kv_heads * page * kHeadDim;
  p.nnz_qo = rows_;
  p.num_qo_heads = static_cast<int>(heads);
  p.num_kv_heads = static_cast<int>(kv_heads);
  p.group_size = static_cast<int>(heads / kv_heads);
  p.page_size = static_cast<int>(page);
  p.window_left = -1;
  p.causal = true;
  p.additional_params.sm_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  p.additional_params.logits_soft_cap = 0.0f;
  p.kv_indices = d_kv_indices_;
  p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(int_ws_, info.qo_tile_indices_offset);
  p.qo_indptr = GetPtrFromBaseOffset<int32_t>(int_ws_, info.qo_indptr_offset);
  p.kv_indptr = GetPtrFromBaseOffset<int32_t>(int_ws_, info.kv_indptr_offset);
  p.qo_lens = GetPtrFromBaseOffset<int32_t>(int_ws_, info.qo_len_offset);
  p.kv_lens = GetPtrFromBaseOffset<int32_t>(int_ws_, info.kv_len_offset);
  p.head_indices = GetPtrFromBaseOffset<int32_t>(int_ws_, info.head_indices_offset);
  p.work_indptr = GetPtrFromBaseOffset<int32_t>(int_ws_, info.work_indptr_offset);
  p.batch_indices = GetPtrFromBaseOffset<int32_t>(int_ws_, info.batch_indices_offset);
  flashinfer_check(flashinfer::BatchPrefillWithPagedKVCacheDispatched<kHeadDim, kHeadDim, flashinfer::MaskMode::kCausal,
                                                           /*LEFT_SLIDING_WINDOW=*/false,
                                                           /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false,
                                                           flashinfer::DefaultAttention</*soft_cap=*/false>>(
            p, /*enable_pdl=*/false, stream),
        "BatchPrefillWithPagedKVCacheDispatched (SM90)");
}

}  // namespace optimate::cuda::bench
