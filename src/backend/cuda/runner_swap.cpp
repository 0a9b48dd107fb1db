// The CUDA runner's host tier: pinned, mapped host arenas, block copies on a second stream
// (kv_swap.h) overlapped with the steps, and the wait a step does only for copies of its own
// blocks (kv/copy_tracker.h).
#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/runner_state.h"
#include "core/error.h"
#include "core/logging.h"

namespace optimate::cuda {
namespace {

KvSwapShape swap_shape(const CudaModelRunner::State& st) {
  return {st.kv_cache.get(), st.host_kv, st.kv_shape.num_blocks, st.kv_shape.num_host_slots(),
          st.kv_shape.layout.slot_bytes, st.config.num_layers};
}

cudaEvent_t take_event(CudaModelRunner::State& st) {
  if (!st.spare_events.empty()) {
    cudaEvent_t e = st.spare_events.back();
    st.spare_events.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  OPTIMATE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// Forgets the batches that are done.
void retire_copies(CudaModelRunner::State& st) {
  while (!st.copy_batches.empty()) {
    const auto [id, event] = st.copy_batches.front();
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) break;
    OPTIMATE_CUDA_CHECK(status);
    st.copy_tracker->completed(id);
    st.spare_events.push_back(event);
    st.copy_batches.pop_front();
  }
}

void upload_ops(CudaModelRunner::State& st) {
  if (st.swap_ops.size() < st.swap_staging.size()) {
    OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(st.copy_stream));  // earlier launches may still read it
    st.swap_ops.resize(std::max(st.swap_staging.size(), 2 * st.swap_ops.size()));
  }
  // From pageable memory: the call returns once the bytes are staged.
  OPTIMATE_CUDA_CHECK(cudaMemcpyAsync(st.swap_ops.get(), st.swap_staging.data(),
                                      st.swap_staging.size() * sizeof(KvSwapOp), cudaMemcpyHostToDevice,
                                      st.copy_stream));
}

// Seconds one launch of `op` takes on the copy stream (the second of two runs).
double time_copy(CudaModelRunner::State& st, const KvSwapOp& op) {
  st.swap_staging.assign(1, op);
  upload_ops(st);
  cudaEvent_t start = nullptr, stop = nullptr;
  OPTIMATE_CUDA_CHECK(cudaEventCreate(&start));
  OPTIMATE_CUDA_CHECK(cudaEventCreate(&stop));
  float ms = 0.0f;
  for (int run = 0; run < 2; ++run) {
    OPTIMATE_CUDA_CHECK(cudaEventRecord(start, st.copy_stream));
    kv_swap_copy(swap_shape(st), st.swap_ops.get(), 1, kKvSwapCtas, st.copy_stream);
    OPTIMATE_CUDA_CHECK(cudaEventRecord(stop, st.copy_stream));
    OPTIMATE_CUDA_CHECK(cudaEventSynchronize(stop));
    OPTIMATE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return std::max(1e-6, static_cast<double>(ms) * 1e-3);
}

}  // namespace

void init_host_tier(CudaModelRunner::State& st) {
  const int64_t host_slots = st.kv_shape.num_host_slots();
  if (host_slots <= 0) return;
  if (host_slots > kv::kEntrySlotMask)
    fail(ErrorCode::kInvalidArgument, "a host KV tier of {} slots is more than entries address", host_slots);
  const int64_t slot_bytes = st.kv_shape.layout.slot_bytes;
  const size_t bytes = static_cast<size_t>(2 * st.config.num_layers * host_slots * slot_bytes);
  const cudaError_t status = cudaHostAlloc(&st.host_kv, bytes, cudaHostAllocMapped);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw_out_of_memory(format_braces("pinning {} bytes of host memory for the host KV tier failed: {} (lower "
                                      "swap-space or host-prefix-cache-space)", bytes, cudaGetErrorString(status)));
  }
  OPTIMATE_CUDA_CHECK(cudaStreamCreateWithFlags(&st.copy_stream, cudaStreamNonBlocking));
  OPTIMATE_CUDA_CHECK(cudaEventCreateWithFlags(&st.copies_may_start, cudaEventDisableTiming));
  st.copy_tracker = std::make_unique<kv::CopyTracker>(st.kv_shape.layout, st.kv_shape.num_blocks);

  // The host link, measured with the kernel the copies use: up to 256 MiB each way, over slots
  // nothing holds yet.
  const int64_t per_slot = 2 * st.config.num_layers * slot_bytes;
  const int32_t n = static_cast<int32_t>(
      std::max<int64_t>(1, std::min({host_slots, st.kv_shape.num_blocks, (int64_t{256} << 20) / per_slot})));
  const double out_s = time_copy(st, {0, 0, n, 1});
  const double in_s = time_copy(st, {0, 0, n, 0});
  st.host_link_bytes_per_s = 2.0 * static_cast<double>(n * per_slot) / (out_s + in_s);
  spdlog::info("host KV tier: {:.2f} GiB pinned, {} slots; host link {:.1f} GB/s to host, {:.1f} GB/s back",
               bytes / 1073741824.0, host_slots, n * per_slot / out_s * 1e-9, n * per_slot / in_s * 1e-9);
}

void free_host_tier(CudaModelRunner::State& st) {
  if (st.copy_stream) cudaStreamSynchronize(st.copy_stream);
  for (auto& [id, e] : st.copy_batches) cudaEventDestroy(e);
  for (cudaEvent_t e : st.spare_events) cudaEventDestroy(e);
  st.copy_batches.clear();
  st.spare_events.clear();
  if (st.copies_may_start) cudaEventDestroy(st.copies_may_start);
  if (st.copy_stream) cudaStreamDestroy(st.copy_stream);
  if (st.host_kv) cudaFreeHost(st.host_kv);
  st.host_kv = nullptr;
  st.copy_stream = nullptr;
  st.copies_may_start = nullptr;
}

void wait_for_copies(CudaModelRunner::State& st, const ForwardBatch& batch) {
  if (!st.copy_tracker || st.copy_tracker->idle()) return;
  retire_copies(st);
  int64_t newest = -1;
  for (const SeqSlice& s : batch.seqs) newest = std::max(newest, st.copy_tracker->pending_for(s.block_table));
  if (newest < 0) return;
  for (const auto& [id, event] : st.copy_batches)
    if (id == newest) OPTIMATE_CUDA_CHECK(cudaStreamWaitEvent(st.stream, event, 0));
}

void CudaModelRunner::copy_kv(std::span<const kv::KvCopy> copies) {
  State& st = *state_;
  bind_device(st);
  kv::check_copies(copies, st.kv_shape.num_blocks, st.kv_shape.num_host_slots());
  if (copies.empty()) return;
  retire_copies(st);
  st.swap_staging.clear();
  for (const kv::KvCopy& c : copies)
    st.swap_staging.push_back({c.device_slot, c.host_slot, c.num_slots, c.direction == kv::CopyDirection::kToHost});
  upload_ops(st);
  // After the requantize kernels and every step enqueued so far.
  OPTIMATE_CUDA_CHECK(cudaEventRecord(st.copies_may_start, st.stream));
  OPTIMATE_CUDA_CHECK(cudaStreamWaitEvent(st.copy_stream, st.copies_may_start, 0));
  size_t begin = 0;
  for (size_t end : kv::copy_batches(copies)) {
    kv_swap_copy(swap_shape(st), st.swap_ops.get() + begin, static_cast<int64_t>(end - begin), kKvSwapCtas,
                 st.copy_stream);
    begin = end;
  }
  const int64_t id = st.next_copy_batch++;
  cudaEvent_t done = take_event(st);
  OPTIMATE_CUDA_CHECK(cudaEventRecord(done, st.copy_stream));
  st.copy_batches.emplace_back(id, done);
  st.copy_tracker->add(id, copies);
}

double CudaModelRunner::host_link_bytes_per_s() const { return state_->host_link_bytes_per_s; }

}  // namespace optimate::cuda
