#include "bench/sim_runner.h"

#include <algorithm>
#include <cmath>

#include "bench/step_estimator.h"
#include "core/error.h"

namespace optimate::bench {

SimModelRunner::SimModelRunner(CostProfile profile, std::shared_ptr<FakeClock> clock,
                               int64_t logits_vocab_size)
    : cost_(std::move(profile)), clock_(std::move(clock)) {
  OPTIMATE_CHECK(clock_ != nullptr, "simulated runner without a clock");
  if (logits_vocab_size < 2)
    fail(ErrorCode::kInvalidArgument, "simulated vocabulary size must be >= 2, got {}", logits_vocab_size);
  const CostProfile& p = cost_.profile();
  config_ = p.model;
  config_.vocab_size = logits_vocab_size;
  config_.eos_token_ids.clear();
  // The profile's bytes per element name the cache's precision: 4 f32, 2 bf16, 1 int8.
  const kv::KvPrecision full = p.kv_bytes_per_element >= 4 ? kv::KvPrecision::kF32 : kv::KvPrecision::kBF16;
  const kv::KvPrecision base = p.kv_bytes_per_element < 2 ? kv::KvPrecision::kInt8 : full;
  kv_shape_ = {.num_layers = p.model.num_layers, .num_blocks = p.num_kv_blocks,
               .block_size = p.block_size, .num_kv_heads = p.model.num_kv_heads,
               .head_dim = p.model.head_dim,
               .layout = kv::plan_kv_layout(full, base, std::nullopt, p.model.num_kv_heads,
                                            p.block_size, p.model.head_dim)};
}

size_t SimModelRunner::run(const ForwardBatch& batch) {
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
