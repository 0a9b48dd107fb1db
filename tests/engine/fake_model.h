// A tiny deterministic "model" for engine tests: each token's KV entry is a hash of (token,
// position), written through the block table, and the logits of a sequence's last token hash
// every KV entry it reads back through the block table. A wrong block table, a block shared
// by mistake or a stale entry after preemption changes the tokens, so bookkeeping bugs show
// up as different outputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runner/model_runner.h"
#include "core/error.h"
#include "engine/text_codec.h"

namespace optimate::testing {

inline uint64_t fake_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class FakeModelRunner final : public ModelRunner {
 public:
  static constexpr int64_t kVocab = 64;
  static constexpr int32_t kEos = 1;

  // `host_tier`: a host tier of that many blocks, swap region then prefix cache (copy_kv moves
  // their entries).
  FakeModelRunner(int64_t num_blocks, int64_t block_size, int64_t max_len = 4096, kv::HostTierSlots host_tier = {}) {
    config_.vocab_size = kVocab;
    config_.num_layers = 1;
    config_.num_heads = 1;
    config_.num_kv_heads = 1;
    config_.head_dim = 1;
    config_.hidden_size = 1;
    config_.max_position_embeddings = max_len;
    config_.eos_token_ids = {kEos};
    shape_ = {1, num_blocks, block_size, 1, 1};
    shape_.layout.slot_bytes = 2 * block_size;  // one bf16 value a token: what a host tier is sized by
    shape_.host_tier = host_tier;
    kv_.assign(static_cast<size_t>(num_blocks * block_size), kPoison);
    host_.assign(static_cast<size_t>(shape_.num_host_slots() * block_size), kPoison);
  }

  const ModelConfig& config() const override { return config_; }
  const KvCacheShape& kv_shape() const override { return shape_; }
  StepCapacity capacity() const override { return capacity_; }
  void requantize(std::span<const RequantizeOp> ops) override {
    OPTIMATE_CHECK(ops.empty(), "the fake runner holds one precision");
  }
  void copy_kv(std::span<const kv::KvCopy> copies) override {
    kv::check_copies(copies, shape_.num_blocks, shape_.num_host_slots());
    const int64_t bs = shape_.block_size;
    for (const kv::KvCopy& c : copies) {
      auto dev = kv_.begin() + c.device_slot * bs, host = host_.begin() + c.host_slot * bs;
      if (c.direction == kv::CopyDirection::kToHost) std::copy_n(dev, c.num_slots * bs, host);
      else std::copy_n(host, c.num_slots * bs, dev);
      num_copied_blocks_ += 1;
    }
  }
  double host_link_bytes_per_s() const override { return shape_.num_host_slots() > 0 ? 1e9 : 0.0; }
  int64_t num_copied_blocks() const { return num_copied_blocks_; }
  // A runner that allocated for at most this much per step (as the CUDA runner does).
  void set_capacity(StepCapacity capacity) { capacity_ = capacity; }
  int64_t num_forward_tokens() const { return num_forward_tokens_; }

  void forward(const ForwardBatch& batch, std::vector<float>& logits) override {
    logits.clear();
    const int64_t bs = shape_.block_size;
    // Writes first, as a real runner does for every layer before attention.
    for (const SeqSlice& s : batch.seqs) {
      const int64_t end = s.start_pos + static_cast<int64_t>(s.token_ids.size());
      OPTIMATE_CHECK(static_cast<int64_t>(s.block_table.size()) * bs >= end,
                     "block table covers {} positions, slice needs {}", s.block_table.size() * bs, end);
      for (size_t i = 0; i < s.token_ids.size(); ++i) {
        const int64_t pos = s.start_pos + static_cast<int64_t>(i);
        kv_[slot(s, pos)] = fake_mix((static_cast<uint64_t>(s.token_ids[i]) << 32) ^ pos);
      }
      num_forward_tokens_ += static_cast<int64_t>(s.token_ids.size());
    }
    for (const SeqSlice& s : batch.seqs) {
      if (!s.want_logits && !s.all_logits) continue;
      const int64_t end = s.start_pos + static_cast<int64_t>(s.token_ids.size());
      // all_logits: a row per token of the slice, each what the sequence up to it would give.
      const int64_t first_row = s.all_logits ? s.start_pos : end - 1;
      uint64_t state = 0;
      for (int64_t pos = 0; pos < end; ++pos) {
        state = fake_mix(state ^ kv_[slot(s, pos)]);
        if (pos < first_row) continue;
        for (int64_t v = 0; v < kVocab; ++v)
          logits.push_back(static_cast<float>(fake_mix(state ^ (v * 7919)) % 1000) / 100.0f);
      }
    }
  }

 private:
  static constexpr uint64_t kPoison = 0xdeadbeefull;
  size_t slot(const SeqSlice& s, int64_t pos) const {
    return static_cast<size_t>(s.block_table[pos / shape_.block_size] * shape_.block_size +
                               pos % shape_.block_size);
  }

  ModelConfig config_;
  KvCacheShape shape_;
  StepCapacity capacity_;
  std::vector<uint64_t> kv_;
  std::vector<uint64_t> host_;
  int64_t num_forward_tokens_ = 0;
  int64_t num_copied_blocks_ = 0;
};

// Token t is the two characters "a".."z" + "A".."Z" (by t % 26, t / 26), so text offsets and
// token boundaries never line up with stop strings by accident.
class FakeCodec final : public TextCodec {
 public:
  static std::string piece(int32_t t) {
    return {static_cast<char>('a' + t % 26), static_cast<char>('A' + (t / 26) % 26)};
  }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (char c : text) ids.push_back(2 + static_cast<unsigned char>(c) % 60);
    return ids;
  }
  std::unique_ptr<IncrementalDecoder> make_decoder(std::span<const int32_t>, const DecodeOptions&) const override {
    struct Decoder final : IncrementalDecoder {
      std::string push(int32_t t) override { return piece(t); }
    };
    return std::make_unique<Decoder>();
  }
};

}  // namespace optimate::testing
