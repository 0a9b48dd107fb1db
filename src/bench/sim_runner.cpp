#include "bench/sim_runner.h"

#include <algorithm>
#include <cmath>

#include "bench/step_estimator.h"
#include "core/error.h"

namespace optimate::bench {

namespace {

// The profile's bytes per element name its cache's precisions: 4 f32, 2 bf16, 1 int8.
kv::KvPrecision profile_full(const CostProfile& p) {
  return p.kv_bytes_per_element >= 4 ? kv::KvPrecision::kF32 : kv::KvPrecision::kBF16;
}
kv::KvPrecision profile_base(const CostProfile& p) {
  return p.kv_bytes_per_element < 2 ? kv::KvPrecision::kInt8 : profile_full(p);
}

}  // namespace

kv::KvLayout SimModelRunner::plan_layout(const CostProfile& p, std::optional<kv::KvPrecision> finest,
                                         kv::Int4Keys int4_keys, std::optional<kv::KvPrecision> quantized) {
  return kv::plan_kv_layout(profile_full(p), quantized.value_or(profile_base(p)), finest, p.model.num_kv_heads,
                            p.block_size, p.model.head_dim, int4_keys);
}

int64_t SimModelRunner::num_slots(const CostProfile& p, const kv::KvLayout& layout) {
  // The profile's own cache, or its memory laid out as the configuration asks.
  if (!layout.dynamic() && layout.base == profile_base(p)) return p.num_kv_blocks;
  const int64_t block = kv::BlockLayout(profile_base(p), p.model.num_kv_heads, p.block_size, p.model.head_dim).total_bytes;
  return kv::num_slots_for_memory(2 * p.model.num_layers * block * p.num_kv_blocks, p.model.num_layers, layout);
}

SimModelRunner::SimModelRunner(CostProfile profile, std::shared_ptr<FakeClock> clock,
                               int64_t logits_vocab_size, kv::HostTierSlots host_tier,
                               std::optional<kv::KvPrecision> finest, kv::Int4Keys int4_keys,
                               std::optional<kv::KvPrecision> quantized)
    : cost_(std::move(profile)),
      clock_(std::move(clock)),
      copies_(plan_layout(cost_.profile(), finest, int4_keys, quantized),
              num_slots(cost_.profile(), plan_layout(cost_.profile(), finest, int4_keys, quantized))) {
  OPTIMATE_CHECK(clock_ != nullptr, "simulated runner without a clock");
  if (logits_vocab_size < 2)
    fail(ErrorCode::kInvalidArgument, "simulated vocabulary size must be >= 2, got {}", logits_vocab_size);
  const CostProfile& p = cost_.profile();
  if (host_tier.swap + host_tier.prefix > 0 && !(p.host_link_bytes_per_s > 0.0))
    fail(ErrorCode::kInvalidArgument, "profile {} has no host_link_bytes_per_s: the simulated backend cannot time "
         "copies to host memory", p.name);
  config_ = p.model;
  config_.vocab_size = logits_vocab_size;
  config_.eos_token_ids.clear();
  const kv::KvLayout layout = plan_layout(p, finest, int4_keys, quantized);
  kv_shape_ = {.num_layers = p.model.num_layers, .num_blocks = num_slots(p, layout),
               .block_size = p.block_size, .num_kv_heads = p.model.num_kv_heads,
               .head_dim = p.model.head_dim, .layout = layout, .host_tier = host_tier};
}

double SimModelRunner::block_bytes(int32_t code) const {
  const kv::KvPrecision p = kv::precision_of_code(code, kv_shape_.layout.full);
  const kv::BlockLayout k(p, kv_shape_.num_kv_heads, kv_shape_.block_size, kv_shape_.head_dim,
                          kv_shape_.layout.int4_keys);
  const kv::BlockLayout v(p, kv_shape_.num_kv_heads, kv_shape_.block_size, kv_shape_.head_dim);
  return static_cast<double>(kv_shape_.num_layers * (k.total_bytes + v.total_bytes));
}

void SimModelRunner::requantize(std::span<const RequantizeOp> ops) {
  double bytes = 0.0;
  for (const RequantizeOp& op : ops)
    bytes += block_bytes(kv::entry_code(op.from_entry)) + block_bytes(kv::entry_code(op.to_entry));
  const CostProfile& p = cost_.profile();
  clock_->advance_ns(std::llround(bytes / (p.memory_bandwidth_bytes_per_s * p.gemm_bandwidth_efficiency) * 1e9));
}

void SimModelRunner::copy_kv(std::span<const kv::KvCopy> copies) {
  kv::check_copies(copies, kv_shape_.num_blocks, kv_shape_.num_host_slots());
  if (copies.empty()) return;
  int64_t bytes = 0;
  for (const kv::KvCopy& c : copies) bytes += kv::copy_bytes(c, kv_shape_.num_layers, kv_shape_.layout.slot_bytes);
  const double ns = static_cast<double>(bytes) / cost_.profile().host_link_bytes_per_s * 1e9;
  copy_engine_free_ns_ = std::max(copy_engine_free_ns_, clock_->now_ns()) + std::llround(ns);
  const int64_t id = next_copy_batch_++;
  copies_.add(id, copies);
  copy_done_ns_[id] = copy_engine_free_ns_;
}

size_t SimModelRunner::run(const ForwardBatch& batch) {
  if (!copies_.idle()) {
    while (!copy_done_ns_.empty() && copy_done_ns_.begin()->second <= clock_->now_ns()) {
      copies_.completed(copy_done_ns_.begin()->first);
      copy_done_ns_.erase(copy_done_ns_.begin());
    }
    int64_t newest = -1;
    for (const SeqSlice& s : batch.seqs) newest = std::max(newest, copies_.pending_for(s.block_table));
    if (newest >= 0) {
      const int64_t wait_ns = copy_done_ns_.at(newest) - clock_->now_ns();
      copy_wait_ns_ += wait_ns;
      clock_->advance_ns(wait_ns);
    }
  }
  const size_t rows = static_cast<size_t>(std::count_if(batch.seqs.begin(), batch.seqs.end(),
                                                        [](const SeqSlice& s) { return s.want_logits; }));
  std::vector<SeqWork> work = batch_work(batch);
  if (kv_shape_.layout.dynamic() || kv_shape_.layout.base != profile_base(cost_.profile())) {
    // The context's bytes block by block, each at its precision.
    const double bs = static_cast<double>(kv_shape_.block_size);
    for (size_t i = 0; i < work.size(); ++i) {
      SeqWork& w = work[i];
      w.full_context_bytes = 0.0;
      for (int64_t b = 0; b * kv_shape_.block_size < w.context_len; ++b) {
        const int32_t code = kv::entry_code(batch.seqs[i].block_table[b]);
        const double tokens = std::min<double>(bs, static_cast<double>(w.context_len - b * kv_shape_.block_size));
        const kv::KvPrecision precision = kv::precision_of_code(code, kv_shape_.layout.full);
        double& bytes = code == 0                              ? w.full_context_bytes
                        : precision == kv::KvPrecision::kInt4 ? w.int4_context_bytes
                                                               : w.quantized_context_bytes;
        bytes += block_bytes(code) * tokens / bs;
      }
    }
  }
  last_ = cost_.step_cost(work);
  clock_->advance_ns(static_cast<int64_t>(std::llround(last_.seconds * 1e9)));
  return rows;
}

void SimModelRunner::forward(const ForwardBatch& batch, std::vector<float>& logits) {
  const size_t rows = run(batch);
  logits.assign(rows * static_cast<size_t>(config_.vocab_size), 0.0f);
}

bool SimModelRunner::forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                                    std::vector<int32_t>& token_ids) {
  for (const SampleSpec& r : rows)
    if (!r.params->greedy()) return false;
  const size_t n = static_cast<size_t>(std::count_if(batch.seqs.begin(), batch.seqs.end(),
                                                     [](const SeqSlice& s) { return s.want_logits; }));
  OPTIMATE_CHECK(n == rows.size(), "step has {} logits rows, {} sampling rows given", n, rows.size());
  run(batch);
  token_ids.assign(n, 0);
  return true;
}

}  // namespace optimate::bench
