#include "parallel/tp_runner.h"

#include <algorithm>

#include "core/error.h"
#include "parallel/rank_command.h"

namespace optimate::parallel {
namespace {

// The logits rows a batch asks for (ModelRunner::forward's count).
int64_t logits_rows(const ForwardBatch& batch) {
  int64_t n = 0;
  for (const SeqSlice& s : batch.seqs) n += s.all_logits ? static_cast<int64_t>(s.token_ids.size()) : s.want_logits ? 1 : 0;
  return n;
}

}  // namespace

TpRunner::TpRunner(const ModelConfig& config, std::vector<std::unique_ptr<Communicator>> comms,
                   const RankFactory& make_rank)
    : config_(config), comms_(std::move(comms)) {
  if (comms_.empty()) fail(ErrorCode::kInvalidArgument, "a tensor-parallel runner needs at least one rank");
  for (int r = 0; r < static_cast<int>(comms_.size()); ++r) {
    if (comms_[r]->rank() != r || comms_[r]->size() != static_cast<int>(comms_.size()))
      fail(ErrorCode::kInternal, "communicator {} is rank {} of {}, expected rank {} of {}", r, comms_[r]->rank(),
           comms_[r]->size(), r, comms_.size());
    ranks_.push_back(make_rank(r, *comms_[r]));
  }
  for (const auto& rank : ranks_) {
    const KvCacheShape& s = rank->kv_shape();
    const KvCacheShape& s0 = ranks_[0]->kv_shape();
    if (s.num_blocks != s0.num_blocks || s.block_size != s0.block_size || s.num_host_slots() != s0.num_host_slots() ||
        s.layout.slot_bytes != s0.layout.slot_bytes || s.layout.page_slots != s0.layout.page_slots)
      fail(ErrorCode::kInternal, "the ranks' KV caches differ in shape");
  }
  kv_shape_ = ranks_[0]->kv_shape();
  kv_shape_.num_kv_heads *= num_ranks();
  kv_shape_.layout.slot_bytes *= num_ranks();
  for (int r = 1; r < num_ranks(); ++r) threads_.emplace_back([this, r] { serve(r); });
}

TpRunner::~TpRunner() { stop(); }

void TpRunner::stop() {
  if (threads_.empty()) return;
  try {
    drive(encode_stop(), [] {});
  } catch (const std::exception&) {
    // The ranks leave their loops on a stop whether or not its barrier succeeded.
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void TpRunner::drive(std::vector<uint8_t> message, const std::function<void()>& own_part) {
  Communicator& comm = *comms_[0];
  run_collectively(comm, [&] {
    comm.broadcast(message, 0);
    own_part();
    comm.barrier();
  });
}

void TpRunner::serve(int r) {
  Communicator& comm = *comms_[r];
  ModelRunner& runner = *ranks_[r];
  RankCommand command;
  std::vector<uint8_t> message;
  std::vector<float> logits;  // this rank's copy of the gathered logits, unused
  std::vector<int32_t> token_ids;  // this rank's draws, unused
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<SampleSpec> greedy_rows;
  for (;;) {
    try {
      run_collectively(comm, [&] {
        message.clear();
        comm.broadcast(message, 0);
        decode_rank_command(message, command);
        switch (command.op) {
          case RankOp::kForward: runner.forward(command.batch, logits); break;
          case RankOp::kForwardSample:
            greedy_rows.assign(static_cast<size_t>(logits_rows(command.batch)), SampleSpec{.params = &greedy});
            runner.forward_sample(command.batch, greedy_rows, token_ids);
            break;
          case RankOp::kRequantize: runner.requantize(command.requantize); break;
          case RankOp::kCopyKv: runner.copy_kv(command.copies); break;
          case RankOp::kStop: break;
        }
        comm.barrier();
      });
    } catch (const std::exception&) {
      // Rank 0 reports the failure to the caller (the abort names this rank and its error).
      if (command.op == RankOp::kStop) return;
      continue;
    }
    if (command.op == RankOp::kStop) return;
  }
}

void TpRunner::forward(const ForwardBatch& batch, std::vector<float>& logits) {
  drive(encode_forward(batch), [&] { ranks_[0]->forward(batch, logits); });
}

bool TpRunner::forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                              std::vector<int32_t>& token_ids) {
  if (!device_sampling_) return false;
  bool sampled = false;
  drive(encode_forward_sample(batch), [&] { sampled = ranks_[0]->forward_sample(batch, rows, token_ids); });
  return sampled;
}

void TpRunner::requantize(std::span<const RequantizeOp> ops) {
  drive(encode_requantize(ops), [&] { ranks_[0]->requantize(ops); });
}

void TpRunner::copy_kv(std::span<const kv::KvCopy> copies) {
  drive(encode_copy_kv(copies), [&] { ranks_[0]->copy_kv(copies); });
}

double TpRunner::host_link_bytes_per_s() const {
  double slowest = ranks_[0]->host_link_bytes_per_s();
  for (const auto& r : ranks_) slowest = std::min(slowest, r->host_link_bytes_per_s());
  return slowest * num_ranks();
}

StepCapacity TpRunner::capacity() const {
  StepCapacity c = ranks_[0]->capacity();
  for (const auto& r : ranks_) {
    const StepCapacity rc = r->capacity();
    c.max_num_seqs = std::min(c.max_num_seqs, rc.max_num_seqs);
    c.max_num_batched_tokens = std::min(c.max_num_batched_tokens, rc.max_num_batched_tokens);
    c.max_model_len = std::min(c.max_model_len, rc.max_model_len);
  }
  return c;
}

int64_t TpRunner::weight_bytes() const {
  int64_t n = 0;
  for (const auto& r : ranks_) n += r->weight_bytes();
  return n;
}

}  // namespace optimate::parallel
