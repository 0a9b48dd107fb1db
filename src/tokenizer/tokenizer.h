// Text <-> token ids, equal to Hugging Face `tokenizers` for the vocabularies we serve:
// byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM2 pre-tokenizers) and SentencePiece BPE with
// byte fallback (Llama 2), loaded from tokenizer.json or from GGUF metadata.
//
// encode(): invalid UTF-8 is first replaced (each maximal ill-formed subpart becomes U+FFFD,
// as Python's decode(errors="replace") does); added/special tokens written in the text are
// matched before pre-tokenization; add_special_tokens adds BOS/EOS as the tokenizer.json
// post-processor or the GGUF add_bos_token/add_eos_token flags say.
//
// A Tokenizer is immutable after loading; encode/decode may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace optimate {

class GgufFile;

namespace tokenizer {

// Everything a loader gathers; the Tokenizer constructor checks it and builds the indexes.
struct TokenizerParts {
  std::string name;  // the file it came from, for messages
  std::string kind;  // "byte-level BPE" or "SentencePiece BPE"
  std::vector<std::string> id_to_token;
  TokenIndex vocab;                                  // the BPE model's tokens
  std::vector<std::pair<int32_t, int32_t>> merges;  // by rank
  BpeOptions bpe;
  std::vector<AddedToken> added_tokens;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  DecoderSpec decoder;
  std::vector<int32_t> prefix_ids;  // added around the text when add_special_tokens
  std::vector<int32_t> suffix_ids;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  std::string chat_template;  // source text, empty when the model has none
};

}  // namespace tokenizer

class Tokenizer {
 public:
  explicit Tokenizer(tokenizer::TokenizerParts parts);

  // `path` is a GGUF file, a tokenizer.json file, or a directory holding tokenizer.json (and,
  // optionally, tokenizer_config.json / chat_template.jinja). Throws Error naming the file.
  static std::shared_ptr<const Tokenizer> load(const std::string& path);
  static std::shared_ptr<const Tokenizer> from_gguf(const GgufFile& file);
  // `config_path` may be empty.
  static std::shared_ptr<const Tokenizer> from_tokenizer_json(const std::string& json_path,
                                                              const std::string& config_path);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Throws kInvalidArgument for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  const std::string& name() const { return parts_.name; }
  const std::string& kind() const { return parts_.kind; }
  int32_t vocab_size() const { return static_cast<int32_t>(parts_.id_to_token.size()); }
  // The vocabulary spelling of `id` ("Ġworld", "<0x0A>"); throws for an id out of range.
  const std::string& id_to_token(int32_t id) const;
  int32_t token_to_id(std::string_view token) const;  // -1 when absent
  bool is_special(int32_t id) const;
  // An added token's content (special or not); nullptr for a token of the BPE model.
  const std::string* added_content(int32_t id) const;
  int32_t bos_id() const { return parts_.bos_id; }
  int32_t eos_id() const { return parts_.eos_id; }
  // Tokens that end a generated turn: eos plus the end-of-turn specials chat templates write
  // (<|eot_id|>, <|eom_id|>, <|im_end|>, <|endoftext|>, <|end_of_text|>) that exist here.
  std::vector<int32_t> stop_ids() const;
  const tokenizer::DecoderSpec& decoder() const { return parts_.decoder; }

  const std::string& chat_template_source() const { return parts_.chat_template; }
  // Throws kNotFound when the model has no template, kUnsupported when it is not recognised.
  ChatTemplate chat_template() const;

 private:
  void check_id(int32_t id) const;

  tokenizer::TokenizerParts parts_;
  tokenizer::BpeModel model_;
  tokenizer::AddedTokenMatcher raw_matcher_;         // non-normalized added tokens
  tokenizer::AddedTokenMatcher normalized_matcher_;  // normalized added tokens
  tokenizer::TokenIndex added_index_;
  std::vector<uint8_t> special_;  // per id
  std::unordered_map<int32_t, size_t> added_of_id_;  // id -> index in parts_.added_tokens
};

}  // namespace optimate
