#include "tokenizer/bpe_model.h"

#include <queue>

#include <fmt/format.h>

#include "core/error.h"

namespace optimate::tokenizer {

BpeModel::BpeModel(TokenIndex vocab, const std::vector<std::pair<int32_t, int32_t>>& merges,
                   const std::vector<std::string>& id_to_token, BpeOptions options)
    : vocab_(std::move(vocab)), options_(options) {
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto [a, b] = merges[rank];
    const std::string merged = id_to_token.at(a) + id_to_token.at(b);
    const int32_t id = find(merged);
    if (id < 0)
      fail(ErrorCode::kInvalidFile, "merge {:?} + {:?} makes {:?}, which is not in the vocabulary",
           id_to_token[a], id_to_token[b], merged);
    // A repeated pair keeps its last rank, as Hugging Face's merge map does.
    merges_.insert_or_assign(key(a, b), Merge{static_cast<int32_t>(rank), id});
  }
  for (int b = 0; b < 256; ++b) byte_ids_[b] = find(fmt::format("<0x{:02X}>", b));
}

int32_t BpeModel::find(std::string_view token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const int32_t id = find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }

  // Initial symbols: one per character (or per byte under byte fallback).
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  };
  bool pending_unk = false;  // a run of unknown characters not yet emitted
  for (size_t pos = 0; pos < word.size();) {
    size_t len = 1;
    const auto b0 = static_cast<uint8_t>(word[pos]);
    if (b0 >= 0xF0) len = 4; else if (b0 >= 0xE0) len = 3; else if (b0 >= 0xC0) len = 2;
    len = std::min(len, word.size() - pos);
    const std::string_view ch = word.substr(pos, len);
    pos += len;
    if (const int32_t id = find(ch); id >= 0) {
      if (pending_unk) add(options_.unk_id);
      pending_unk = false;
      add(id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        // Hugging Face leaves a pending unk where it is, so it lands after these bytes.
        for (char c : ch) add(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (options_.unk_id < 0) continue;
    if (pending_unk && !options_.fuse_unk) add(options_.unk_id);
    pending_unk = true;
  }
  if (pending_unk) add(options_.unk_id);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const Candidate& o) const {  // priority_queue pops the largest
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  auto consider = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const auto it = merges_.find(key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    const int32_t right_index = left.next;
    const auto it = merges_.find(key(left.id, symbols[right_index].id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    Symbol& right = symbols[right_index];
    left.id = top.new_id;
    left.next = right.next;
    right.alive = false;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (const Symbol& s : symbols)
    if (s.alive) out.push_back(s.id);
}

}  // namespace optimate::tokenizer
