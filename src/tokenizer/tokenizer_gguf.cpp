// Loading a tokenizer from GGUF metadata (tokenizer.ggml.*), as llama.cpp's converter writes
// it: "gpt2" vocabularies are byte-level BPE with ranked merges; "llama" vocabularies are
// SentencePiece BPE whose merge order follows the token scores.
#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "core/logging.h"
#include "model/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace optimate {

using namespace tokenizer;

namespace {

// llama.cpp token types.
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// SentencePiece BPE merges: every split of a token into two tokens, the highest-scoring result
// first; ties as transformers orders them (result id, then shorter left piece).
std::vector<std::pair<int32_t, int32_t>> merges_from_scores(const std::vector<std::string>& tokens,
                                                            const std::vector<double>& scores,
                                                            const TokenIndex& vocab) {
  struct Candidate {
    double score;
    int32_t merged, left, right;
    size_t left_len, right_len;
  };
  std::vector<Candidate> candidates;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& t = tokens[id];
    for (size_t cut = 1; cut < t.size(); ++cut) {
      if ((static_cast<uint8_t>(t[cut]) & 0xC0) == 0x80) continue;  // inside a character
      const auto l = vocab.find(std::string_view(t).substr(0, cut));
      if (l == vocab.end()) continue;
      const auto r = vocab.find(std::string_view(t).substr(cut));
      if (r == vocab.end()) continue;
      candidates.push_back({scores[id], static_cast<int32_t>(id), l->second, r->second, cut, t.size() - cut});
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(b.score, a.merged, a.left_len, a.right_len, a.left, a.right) <
           std::tie(a.score, b.merged, b.left_len, b.right_len, b.left, b.right);
  });
  std::vector<std::pair<int32_t, int32_t>> merges;
  merges.reserve(candidates.size());
  for (const Candidate& c : candidates) merges.emplace_back(c.left, c.right);
  return merges;
}

// Flags are written as bools by llama.cpp's converter; accept integers too.
bool flag(const GgufFile& file, std::string_view key, bool fallback) {
  const GgufValue* v = file.find(key);
  if (v == nullptr) return fallback;
  return v->type == GgufType::kBool ? v->as_bool() : v->as_int() != 0;
}

}  // namespace

std::shared_ptr<const Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  TokenizerParts parts;
  parts.name = file.name();
  const std::string model = file.at("tokenizer.ggml.model").as_string();
  if (model != "gpt2" && model != "llama")
    fail(ErrorCode::kUnsupported, "{}: tokenizer.ggml.model {:?} is not supported (gpt2, llama)",
         file.name(), model);
  const bool spm = model == "llama";

  parts.id_to_token = file.at("tokenizer.ggml.tokens").as_strings();
  const size_t n = parts.id_to_token.size();
  std::vector<int64_t> types(n, kNormal);
  if (const GgufValue* v = file.find("tokenizer.ggml.token_type")) types = v->as_ints();
  if (types.size() != n)
    fail(ErrorCode::kInvalidFile, "{}: tokenizer.ggml.token_type has {} entries for {} tokens",
         file.name(), types.size(), n);

  for (size_t id = 0; id < n; ++id) {
    const auto i = static_cast<int32_t>(id);
    parts.vocab.try_emplace(parts.id_to_token[id], i);
    if (types[id] == kControl || types[id] == kUnknown || types[id] == kUserDefined) {
      AddedToken t;
      t.id = i;
      t.content = parts.id_to_token[id];
      t.special = types[id] != kUserDefined;
      parts.added_tokens.push_back(std::move(t));
    }
  }

  auto optional_id = [&](const char* key) {
    const int64_t id = file.get_int(key, -1);
    return id >= 0 && static_cast<size_t>(id) < n ? static_cast<int32_t>(id) : -1;
  };
  parts.bos_id = optional_id("tokenizer.ggml.bos_token_id");
  parts.eos_id = optional_id("tokenizer.ggml.eos_token_id");
  const bool add_bos = flag(file, "tokenizer.ggml.add_bos_token", spm);
  const bool add_eos = flag(file, "tokenizer.ggml.add_eos_token", false);
  if (add_bos && parts.bos_id >= 0) parts.prefix_ids.push_back(parts.bos_id);
  if (add_eos && parts.eos_id >= 0) parts.suffix_ids.push_back(parts.eos_id);
  parts.chat_template = file.get_string("tokenizer.chat_template", "");

  if (spm) {
    parts.kind = "SentencePiece BPE";
    std::vector<double> scores(n, 0.0);
    if (const GgufValue* v = file.find("tokenizer.ggml.scores")) scores = v->as_floats();
    if (scores.size() != n)
      fail(ErrorCode::kInvalidFile, "{}: tokenizer.ggml.scores has {} entries for {} tokens",
           file.name(), scores.size(), n);
    parts.merges = merges_from_scores(parts.id_to_token, scores, parts.vocab);
    const bool dummy_prefix = flag(file, "tokenizer.ggml.add_space_prefix", true);
    parts.normalizer = Normalizer::sentencepiece(dummy_prefix);
    parts.bpe.byte_fallback = true;
    parts.bpe.fuse_unk = true;
    parts.bpe.unk_id = optional_id("tokenizer.ggml.unknown_token_id");
    if (parts.bpe.unk_id < 0) {
      const auto it = std::find(types.begin(), types.end(), kUnknown);
      if (it != types.end()) parts.bpe.unk_id = static_cast<int32_t>(it - types.begin());
    }
    parts.decoder.kind = DecoderSpec::Kind::kSentencePiece;
    parts.decoder.byte_fallback = true;
    parts.decoder.strip_leading_spaces = dummy_prefix ? 1 : 0;
  } else {
    parts.kind = "byte-level BPE";
    try {
      // Files converted before llama.cpp recorded the style lack the key; GPT-2's regex is
      // what byte-level vocabularies of that era were trained with.
      if (file.find("tokenizer.ggml.pre") == nullptr)
        spdlog::warn("{}: no tokenizer.ggml.pre; using the GPT-2 pre-tokenizer", file.name());
      parts.pre_tokenizer = PreTokenizer::from_gguf_style(file.get_string("tokenizer.ggml.pre", "gpt-2"));
    } catch (const Error& e) {
      fail(e.code(), "{}: {}", file.name(), e.what());
    }
    for (const std::string& merge : file.at("tokenizer.ggml.merges").as_strings()) {
      const size_t space = merge.find(' ', 1);
      if (space == std::string::npos)
        fail(ErrorCode::kInvalidFile, "{}: tokenizer.ggml.merges entry {:?} has no space", file.name(), merge);
      const auto l = parts.vocab.find(std::string_view(merge).substr(0, space));
      const auto r = parts.vocab.find(std::string_view(merge).substr(space + 1));
      if (l == parts.vocab.end() || r == parts.vocab.end())
        fail(ErrorCode::kInvalidFile, "{}: tokenizer.ggml.merges entry {:?} uses a token not in the vocabulary",
             file.name(), merge);
      parts.merges.emplace_back(l->second, r->second);
    }
  }
  return std::make_shared<const Tokenizer>(std::move(parts));
}

}  // namespace optimate
