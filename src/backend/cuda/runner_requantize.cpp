// CudaModelRunner::requantize: the ops checked against the cache's layout, then the kernels of
// kv_requantize.h on the runner's stream, so the next step sees the quantized blocks.
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_block.h"
#include "backend/cuda/kv_requantize.h"
#include "backend/cuda/runner_state.h"
#include "core/error.h"

namespace optimate::cuda {

void CudaModelRunner::requantize(std::span<const RequantizeOp> ops) {
  if (ops.empty()) return;
  State& st = *state_;
  bind_device(st);
  const kv::KvLayout& layout = st.kv_shape.layout;
  if (!layout.dynamic())
    fail(ErrorCode::kInvalidArgument, "requantize: this KV cache holds {} blocks only (no kv_quant precision)",
         kv::kv_precision_name(layout.base));
  std::vector<int32_t> packed;
  packed.reserve(2 * ops.size());
  std::vector<bool> seen(static_cast<size_t>(st.kv_shape.num_blocks), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    const RequantizeOp& op = ops[i];
    const int to_code = kv_entry_code(op.to_entry);
    const int32_t slot = kv_entry_slot(op.from_entry), to_slot = kv_entry_slot(op.to_entry);
    if (op.from_entry < 0 || kv_entry_code(op.from_entry) != kKvBf16 || op.to_entry < 0 ||
        to_code == kKvBf16 || to_code > kKvInt4 || st.limits.kv_block_slots[static_cast<size_t>(to_code)] == 0)
      fail(ErrorCode::kInvalidArgument, "requantize op {}: {:#x} -> {:#x} is not a bf16 block turned into a "
           "block of a precision this cache holds", i, static_cast<uint32_t>(op.from_entry),
           static_cast<uint32_t>(op.to_entry));
    const int64_t to_end = to_slot + st.limits.kv_block_slots[static_cast<size_t>(to_code)];
    if (slot + layout.page_slots > st.kv_shape.num_blocks || to_end > st.kv_shape.num_blocks ||
        seen[static_cast<size_t>(slot)] || (to_slot != slot && seen[static_cast<size_t>(to_slot)]))
      fail(ErrorCode::kInvalidArgument, "requantize op {}: slot {} or {} is outside the cache's {} or named twice",
           i, slot, to_slot, st.kv_shape.num_blocks);
    seen[static_cast<size_t>(slot)] = true;
    seen[static_cast<size_t>(to_slot)] = true;
    packed.push_back(op.from_entry);
    packed.push_back(op.to_entry);
  }
  if (st.requantize_ops.size() < packed.size()) {
    OPTIMATE_CUDA_CHECK(cudaStreamSynchronize(st.stream));  // an earlier call's kernels may read it
    st.requantize_ops.resize(packed.size());
  }
  // From pageable memory: the call returns once the bytes are staged, so `packed` may go.
  OPTIMATE_CUDA_CHECK(cudaMemcpyAsync(st.requantize_ops.get(), packed.data(), packed.size() * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, st.stream));
  const KvRequantizeShape shape{st.kv_cache.get(), st.kv_shape.num_blocks, layout.slot_bytes, st.config.num_layers,
                                st.config.num_kv_heads, st.kv_shape.block_size, st.config.head_dim};
  kv_requantize(shape, st.requantize_ops.get(), static_cast<int64_t>(ops.size()), st.requantize_scratch.get(),
                static_cast<int64_t>(st.requantize_scratch.bytes()), st.stream);
}

}  // namespace optimate::cuda
