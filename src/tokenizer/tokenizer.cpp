#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/gguf_file.h"
#include "tokenizer/utf8.h"

namespace optimate {

using namespace tokenizer;

Tokenizer::Tokenizer(TokenizerParts parts) : parts_(std::move(parts)) {
  const auto n = static_cast<int32_t>(parts_.id_to_token.size());
  auto check = [&](int32_t id, std::string_view what) {
    if (id < -1 || id >= n)
      fail(ErrorCode::kInvalidFile, "{}: {} id {} is outside the vocabulary of {}", parts_.name,
           what, id, n);
  };
  check(parts_.bos_id, "bos");
  check(parts_.eos_id, "eos");
  check(parts_.bpe.unk_id, "unk");
  for (int32_t id : parts_.prefix_ids) check(id, "post-processor");
  for (int32_t id : parts_.suffix_ids) check(id, "post-processor");

  special_.assign(n, 0);
  std::vector<AddedToken> raw, normalized;
  for (const AddedToken& t : parts_.added_tokens) {
    check(t.id, "added token");
    if (t.id < 0) fail(ErrorCode::kInvalidFile, "{}: added token {:?} has no id", parts_.name, t.content);
    special_[t.id] = t.special;
    added_index_.try_emplace(t.content, t.id);
    added_of_id_.try_emplace(t.id, static_cast<size_t>(&t - parts_.added_tokens.data()));
    if (!t.normalized) {
      raw.push_back(t);
      continue;
    }
    // Hugging Face matches a normalized token by its normalized spelling ("zqx" is found as
    // "▁zqx" after a SentencePiece normalizer) and decodes it with that spelling too.
    AddedToken n = t;
    n.content = parts_.normalizer.apply(t.content);
    parts_.id_to_token[t.id] = n.content;
    normalized.push_back(std::move(n));
  }
  raw_matcher_ = AddedTokenMatcher(raw);
  normalized_matcher_ = AddedTokenMatcher(normalized);
  try {
    model_ = BpeModel(std::move(parts_.vocab), parts_.merges, parts_.id_to_token, parts_.bpe);
  } catch (const Error& e) {
    fail(e.code(), "{}: {}", parts_.name, e.what());
  }
  parts_.vocab.clear();
  parts_.merges.clear();
  parts_.merges.shrink_to_fit();
}

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (!fs::exists(dir / "tokenizer.json"))
      fail(ErrorCode::kNotFound, "{}: no tokenizer.json in this directory", path);
    const fs::path config = dir / "tokenizer_config.json";
    return from_tokenizer_json((dir / "tokenizer.json").string(),
                               fs::exists(config) ? config.string() : std::string());
  }
  if (!fs::exists(path, ec)) fail(ErrorCode::kNotFound, "{}: no such file or directory", path);
  char magic[4] = {};
  std::ifstream(path, std::ios::binary).read(magic, sizeof(magic));
  if (std::string_view(magic, sizeof(magic)) == "GGUF") return from_gguf(*GgufFile::open(path));
  const fs::path config = fs::path(path).parent_path() / "tokenizer_config.json";
  return from_tokenizer_json(path, fs::exists(config) ? config.string() : std::string());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string clean;
  if (!is_valid_utf8(text)) {
    clean = sanitize_utf8(text);
    text = clean;
  }
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = parts_.prefix_ids;
  std::vector<Segment> segments, inner;
  std::vector<std::string> words;
  raw_matcher_.split(text, segments);
  for (const Segment& seg : segments) {
    if (seg.token_id >= 0) {
      ids.push_back(seg.token_id);
      continue;
    }
    const std::string normalized = parts_.normalizer.apply(seg.text);
    inner.clear();
    normalized_matcher_.split(normalized, inner);
    for (const Segment& piece : inner) {
      if (piece.token_id >= 0) {
        ids.push_back(piece.token_id);
        continue;
      }
      words.clear();
      parts_.pre_tokenizer.split(piece.text, words);
      for (const std::string& w : words) model_.encode_word(w, ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), parts_.suffix_ids.begin(), parts_.suffix_ids.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  DecodeStream stream(parts_.decoder);
  std::string out;
  for (int32_t id : ids) {
    check_id(id);
    if (skip_special_tokens && special_[id]) continue;
    stream.push(parts_.id_to_token[id], out);
  }
  stream.finish(out);
  return out;
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    fail(ErrorCode::kInvalidArgument, "token id {} is outside the vocabulary of {} ({})", id,
         vocab_size(), parts_.name);
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  check_id(id);
  return parts_.id_to_token[id];
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = added_index_.find(token); it != added_index_.end()) return it->second;
  return model_.find(token);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[id];
}

const std::string* Tokenizer::added_content(int32_t id) const {
  const auto it = added_of_id_.find(id);
  return it == added_of_id_.end() ? nullptr : &parts_.added_tokens[it->second].content;
}

std::vector<int32_t> Tokenizer::stop_ids() const {
  std::vector<int32_t> ids;
  if (parts_.eos_id >= 0) ids.push_back(parts_.eos_id);
  for (std::string_view t : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>"}) {
    const int32_t id = token_to_id(t);
    if (id >= 0 && is_special(id) && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

ChatTemplate Tokenizer::chat_template() const {
  if (parts_.chat_template.empty())
    fail(ErrorCode::kNotFound, "{}: the model has no chat template", parts_.name);
  const std::string bos = parts_.bos_id >= 0 ? parts_.id_to_token[parts_.bos_id] : std::string();
  try {
    return ChatTemplate::recognize(parts_.chat_template, bos);
  } catch (const Error& e) {
    fail(e.code(), "{}: {}", parts_.name, e.what());
  }
}

}  // namespace optimate
