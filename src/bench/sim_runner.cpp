#include "bench/sim_runner.h"

#include <algorithm>
#include <cmath>

#include "bench/step_estimator.h"
#include "core/error.h"

namespace optimate::bench {

kv::KvLayout SimModelRunner::plan_layout(const CostProfile& p, std::optional<kv::KvPrecision> kv_finest) {
  // The profile's bytes per element name the cache's precision: 4 f32, 2 bf16, 1 int8.
  const kv::KvPrecision full = p.kv_bytes_per_element >= 4 ? kv::KvPrecision::kF32 : kv::KvPrecision::kBF16;
  const kv::KvPrecision base = p.kv_bytes_per_element < 2 ? kv::KvPrecision::kInt8 : full;
  return kv::plan_kv_layout(full, base, kv_finest, p.model.num_kv_heads, p.block_size, p.model.head_dim);
}

int64_t SimModelRunner::num_slots(const CostProfile& p, const kv::KvLayout& layout) {
  if (!layout.dynamic()) return p.num_kv_blocks;
  const kv::KvLayout fixed = plan_layout(p);
  const int64_t bytes = p.num_kv_blocks * 2 * p.model.num_layers * fixed.slot_bytes;
  return kv::num_slots_for_memory(bytes, p.model.num_layers, layout);
}

SimModelRunner::SimModelRunner(CostProfile profile, std::shared_ptr<FakeClock> clock,
                               int64_t logits_vocab_size, int64_t num_host_slots,
                               std::optional<kv::KvPrecision> kv_finest)
    : cost_(std::move(profile)),
      clock_(std::move(clock)),
      copies_(plan_layout(cost_.profile(), kv_finest), num_slots(cost_.profile(), plan_layout(cost_.profile(), kv_finest))) {
  OPTIMATE_CHECK(clock_ != nullptr, "simulated runner without a clock");
  if (logits_vocab_size < 2)
    fail(ErrorCode::kInvalidArgument, "simulated vocabulary size must be >= 2, got {}", logits_vocab_size);
  const CostProfile& p = cost_.profile();
  if (num_host_slots > 0 && !(p.host_link_bytes_per_s > 0.0))
    fail(ErrorCode::kInvalidArgument, "profile {} has no host_link_bytes_per_s: the simulated backend cannot time "
         "copies to host memory", p.name);
  config_ = p.model;
  config_.vocab_size = logits_vocab_size;
  config_.eos_token_ids.clear();
  const kv::KvLayout layout = plan_layout(p, kv_finest);
  kv_shape_ = {.num_layers = p.model.num_layers, .num_blocks = num_slots(p, layout),
               .block_size = p.block_size, .num_kv_heads = p.model.num_kv_heads,
               .head_dim = p.model.head_dim, .layout = layout, .num_host_slots = num_host_slots};
}

void SimModelRunner::copy_kv(std::span<const kv::KvCopy> copies) {
  kv::check_copies(copies, kv_shape_.num_blocks, kv_shape_.num_host_slots);
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
  last_ = cost_.step_cost(batch_work(batch));
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
