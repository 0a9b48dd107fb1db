// What the driving rank broadcasts to the others before each call on the model: the step's
// batch (tokens, positions, block tables, which rows want logits; whether the driver samples on
// the device), the KV requantize ops or
// host-tier copies, or the order to stop. Encoded as bytes so the ranks need share nothing but
// a communicator: the same message serves threads of one process and processes of one host.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runner/model_runner.h"

namespace optimate::parallel {

enum class RankOp : uint8_t { kForward = 1, kRequantize = 2, kCopyKv = 3, kStop = 4, kForwardSample = 5 };

std::vector<uint8_t> encode_forward(const ForwardBatch& batch);
// The same batch, the driving rank drawing the tokens on its device (ModelRunner::forward_sample).
std::vector<uint8_t> encode_forward_sample(const ForwardBatch& batch);
std::vector<uint8_t> encode_requantize(std::span<const RequantizeOp> ops);
std::vector<uint8_t> encode_copy_kv(std::span<const kv::KvCopy> copies);
std::vector<uint8_t> encode_stop();

// A decoded message; batch's slices point into the vectors here (so it is not copyable).
struct RankCommand {
  RankOp op = RankOp::kStop;
  ForwardBatch batch;
  std::vector<int32_t> token_ids;    // every slice's tokens, one after another
  std::vector<int32_t> block_table;  // every slice's block-table entries
  std::vector<RequantizeOp> requantize;
  std::vector<kv::KvCopy> copies;

  RankCommand() = default;
  RankCommand(const RankCommand&) = delete;
  RankCommand& operator=(const RankCommand&) = delete;
};

// Error(kInternal) for bytes no encoder above wrote.
void decode_rank_command(std::span<const uint8_t> bytes, RankCommand& out);

}  // namespace optimate::parallel
