// The BPE model: a vocabulary, ranked merges, and the merge loop of Hugging Face's BPE
// (lowest rank first, leftmost on ties), with SentencePiece-style byte fallback.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace optimate::tokenizer {

struct BpeOptions {
  bool byte_fallback = false;  // characters outside the vocabulary become <0xNN> tokens
  int32_t unk_id = -1;         // otherwise they become this token (-1: dropped)
  bool fuse_unk = false;       // consecutive unknown characters share one unk token
  bool ignore_merges = false;  // a word found whole in the vocabulary is one token
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  BpeModel() = default;
  // `merges` lists token-id pairs by rank (first = merged first). Throws kInvalidFile when a
  // merge's result is not in the vocabulary.
  BpeModel(TokenIndex vocab, const std::vector<std::pair<int32_t, int32_t>>& merges,
           const std::vector<std::string>& id_to_token, BpeOptions options);

  int32_t find(std::string_view token) const;  // -1 when absent
  const TokenIndex& vocab() const { return vocab_; }

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  TokenIndex vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256];  // <0xNN> token ids, -1 when absent
  BpeOptions options_;
};

}  // namespace optimate::tokenizer
