// Added tokens (special tokens such as <|im_start|>, and user-added words) are found in the
// raw text before normalization and pre-tokenization, as Hugging Face does: leftmost match,
// longest on ties, honouring lstrip / rstrip / single_word. Tokens marked `normalized` are
// matched in a second pass over the normalized text of the pieces in between.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace optimate::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special_tokens)
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // matches only when not inside a word
  bool normalized = false;   // matched against normalized text
};

// A piece of text: either an added token (token_id >= 0) or text to tokenize normally.
struct Segment {
  int32_t token_id;
  std::string_view text;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  bool empty() const { return tokens_.empty(); }
  // Splits `text` into added-token matches and the text between them (empty gaps omitted).
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Node {
    int32_t child[256];
    int32_t token = -1;  // index into tokens_ of the token ending here
  };
  std::vector<AddedToken> tokens_;
  std::vector<Node> trie_;
};

}  // namespace optimate::tokenizer
