// The driver of rank runners, over stand-in ranks: every rank gets the step rank 0 was given,
// rank 0's result comes back, and a rank that fails fails the call without hanging any rank.
#include "parallel/tp_runner.h"

#include <gtest/gtest.h>

#include <mutex>

#include "core/error.h"
#include "parallel/in_process_communicator.h"
#include "parallel/rank_command.h"

namespace optimate::parallel {
namespace {

// What every rank saw, for the test to compare.
struct Journal {
  std::mutex mu;
  std::vector<std::vector<int32_t>> tokens;  // per rank: every token it ran, in order
  std::vector<std::vector<RequantizeOp>> requantize;
  std::vector<std::vector<kv::KvCopy>> copies;
  std::vector<std::vector<bool>> sampled_greedy;  // per rank: each forward_sample row's greedy()
};

// A rank that "computes" the sum over ranks of (rank + 1) * token for each slice's last token,
// through the communicator, and fails when it meets token 13 on the rank told to.
class StandInRank final : public ModelRunner {
 public:
  StandInRank(Communicator& comm, Journal& journal, int failing_rank) : comm_(comm), journal_(journal), failing_(failing_rank) {
    config_.vocab_size = 2;
    shape_.num_blocks = 4;
    shape_.num_kv_heads = 1;
    shape_.layout.slot_bytes = 128;
  }
  const ModelConfig& config() const override { return config_; }
  const KvCacheShape& kv_shape() const override { return shape_; }
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override {
    std::vector<float> values;
    for (const SeqSlice& s : batch.seqs) {
      {
        std::lock_guard lock(journal_.mu);
        auto& mine = journal_.tokens[comm_.rank()];
        mine.insert(mine.end(), s.token_ids.begin(), s.token_ids.end());
      }
      if (comm_.rank() == failing_ && s.token_ids.back() == 13)
        fail(ErrorCode::kResourceExhausted, "stand-in rank {} out of memory", comm_.rank());
      values.push_back(static_cast<float>((comm_.rank() + 1) * s.token_ids.back()));
      values.push_back(static_cast<float>(s.start_pos));
    }
    comm_.all_reduce_sum(values);
    logits = values;
  }
  // Draws each row's first logit as the token (rank 0's row is every rank's after the sum).
  bool forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> rows,
                      std::vector<int32_t>& token_ids) override {
    std::vector<float> logits;
    forward(batch, logits);
    token_ids.clear();
    std::lock_guard lock(journal_.mu);
    for (size_t i = 0; i < rows.size(); ++i) {
      journal_.sampled_greedy[comm_.rank()].push_back(rows[i].params->greedy());
      token_ids.push_back(static_cast<int32_t>(logits.at(2 * i)));
    }
    return true;
  }
  void requantize(std::span<const RequantizeOp> ops) override {
    std::lock_guard lock(journal_.mu);
    journal_.requantize[comm_.rank()].assign(ops.begin(), ops.end());
  }
  void copy_kv(std::span<const kv::KvCopy> copies) override {
    std::lock_guard lock(journal_.mu);
    journal_.copies[comm_.rank()].assign(copies.begin(), copies.end());
  }
  int64_t weight_bytes() const override { return 10; }

 private:
  Communicator& comm_;
  Journal& journal_;
  int failing_;
  ModelConfig config_;
  KvCacheShape shape_;
};

std::unique_ptr<TpRunner> make(int n, Journal& journal, int failing_rank = -1) {
  journal.tokens.assign(n, {});
  journal.requantize.assign(n, {});
  journal.copies.assign(n, {});
  journal.sampled_greedy.assign(n, {});
  ModelConfig whole;
  whole.vocab_size = 2;
  return std::make_unique<TpRunner>(whole, make_in_process_communicators(n), [&, failing_rank](int, Communicator& c) {
    return std::make_unique<StandInRank>(c, journal, failing_rank);
  });
}

TEST(TpRunner, EveryRankRunsRankZerosStepAndOneResultComesBack) {
  for (int n : {1, 2, 4}) {
    Journal journal;
    auto runner = make(n, journal);
    EXPECT_EQ(runner->kv_shape().layout.slot_bytes, 128 * n);  // a slot's bytes over all ranks
    EXPECT_EQ(runner->kv_shape().num_blocks, 4);
    EXPECT_EQ(runner->weight_bytes(), 10 * n);
    const std::vector<int32_t> a = {5, 6, 7}, b = {9}, table = {0, 1};
    std::vector<float> logits;
    runner->forward({{SeqSlice{a, 3, table, true}, SeqSlice{b, 8, table, true}}}, logits);
    const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
    EXPECT_EQ(logits, (std::vector<float>{7 * ranks_sum, 3.0f * n, 9 * ranks_sum, 8.0f * n})) << n << " ranks";
    const std::vector<RequantizeOp> ops = {{.from_entry = 1, .to_entry = 5}};
    runner->requantize(ops);
    const std::vector<kv::KvCopy> copies = {{.direction = kv::CopyDirection::kToDevice, .device_slot = 2, .host_slot = 1}};
    runner->copy_kv(copies);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(journal.tokens[r], (std::vector<int32_t>{5, 6, 7, 9})) << "rank " << r;
      ASSERT_EQ(journal.requantize[r].size(), 1u);
      EXPECT_EQ(journal.requantize[r][0].to_entry, 5);
      EXPECT_EQ(journal.copies[r], copies);
    }
  }
}

TEST(TpRunner, AFailingRankFailsTheCallNamingItAndTheNextCallRuns) {
  Journal journal;
  auto runner = make(4, journal, /*failing_rank=*/2);
  const std::vector<int32_t> bad = {13}, good = {4}, table = {0};
  std::vector<float> logits;
  try {
    runner->forward({{SeqSlice{bad, 0, table, true}}}, logits);
    FAIL() << "the failing rank went unnoticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 failed: stand-in rank 2 out of memory"), std::string::npos) << e.what();
  }
  runner->forward({{SeqSlice{good, 0, table, true}}}, logits);
  EXPECT_EQ(logits, (std::vector<float>{40.0f, 0.0f}));
}

TEST(TpRunner, DeviceSamplingDrawsOnRankZeroWhileEveryRankRunsTheStep) {
  Journal journal;
  auto runner = make(3, journal);
  const std::vector<int32_t> a = {5, 6}, b = {9}, table = {0, 1};
  const ForwardBatch batch{{SeqSlice{a, 0, table, true}, SeqSlice{b, 4, table, true}}};
  SamplingParams hot;
  hot.temperature = 0.8f;
  const std::vector<SampleSpec> rows = {{.params = &hot}, {.params = &hot}};
  std::vector<int32_t> tokens;
  // Off by default: nothing runs, and the engine falls back to forward.
  EXPECT_FALSE(runner->forward_sample(batch, rows, tokens));
  EXPECT_TRUE(journal.tokens[1].empty());
  runner->set_device_sampling(true);
  ASSERT_TRUE(runner->forward_sample(batch, rows, tokens));
  EXPECT_EQ(tokens, (std::vector<int32_t>{6 * 6, 9 * 6}));  // ranks' (r + 1) summed: 6
  for (int r = 0; r < 3; ++r) EXPECT_EQ(journal.tokens[r], (std::vector<int32_t>{5, 6, 9})) << "rank " << r;
  // Rank 0 draws with the caller's parameters; the others' draws go unused, so they draw greedily.
  EXPECT_EQ(journal.sampled_greedy[0], (std::vector<bool>{false, false}));
  EXPECT_EQ(journal.sampled_greedy[1], (std::vector<bool>{true, true}));
  EXPECT_EQ(journal.sampled_greedy[2], (std::vector<bool>{true, true}));
}

TEST(RankCommand, AStepSurvivesTheTripThroughBytes) {
  const std::vector<int32_t> a = {1, 2, 3}, b = {4}, ta = {7, 8}, tb = {9};
  const ForwardBatch batch{{SeqSlice{a, 10, ta, false}, SeqSlice{b, 0, tb, true, true}}};
  RankCommand cmd;
  decode_rank_command(encode_forward(batch), cmd);
  ASSERT_EQ(cmd.op, RankOp::kForward);
  ASSERT_EQ(cmd.batch.seqs.size(), 2u);
  EXPECT_EQ(std::vector<int32_t>(cmd.batch.seqs[0].token_ids.begin(), cmd.batch.seqs[0].token_ids.end()), a);
  EXPECT_EQ(cmd.batch.seqs[0].start_pos, 10);
  EXPECT_FALSE(cmd.batch.seqs[0].want_logits);
  EXPECT_EQ(std::vector<int32_t>(cmd.batch.seqs[1].block_table.begin(), cmd.batch.seqs[1].block_table.end()), tb);
  EXPECT_TRUE(cmd.batch.seqs[1].all_logits);

  std::vector<uint8_t> bytes = encode_forward(batch);
  bytes.pop_back();
  EXPECT_THROW(decode_rank_command(bytes, cmd), Error);
  decode_rank_command(encode_stop(), cmd);
  EXPECT_EQ(cmd.op, RankOp::kStop);
}

}  // namespace
}  // namespace optimate::parallel
