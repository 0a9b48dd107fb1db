// Streaming detokenization for generated tokens: push ids one at a time and get text deltas.
// A delta never ends inside a UTF-8 character (bytes of an incomplete character, and
// SentencePiece byte-fallback runs, are held back until they resolve), and the concatenation
// of all deltas plus finish() equals Tokenizer::decode of the same ids (unless
// spaces_between_special_tokens is false).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tokenizer/decoder.h"
#include "tokenizer/tokenizer.h"

namespace optimate {

class IncrementalDetokenizer {
 public:
  // spaces_between_special_tokens false (with skip_special_tokens false): an added token
  // right after another is written as its content alone (vLLM's rule for fast tokenizers).
  explicit IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens = true,
                                  bool spaces_between_special_tokens = true);

  // Text that became final with this token (possibly empty). Throws kInvalidArgument for an
  // id outside the vocabulary.
  std::string push(int32_t id);
  // Whatever is still held back; call once when the sequence ends.
  std::string finish();
  // True when some text is held back.
  bool holding() const { return stream_.holding(); }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  bool skip_special_tokens_;
  bool raw_added_runs_;       // !spaces_between_special_tokens && !skip_special_tokens
  bool last_added_ = false;  // the last token pushed was an added token
  tokenizer::DecodeStream stream_;
};

}  // namespace optimate
