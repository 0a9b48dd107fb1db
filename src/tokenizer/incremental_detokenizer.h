// Streaming detokenization for generated tokens: push ids one at a time and get text deltas.
// A delta never ends inside a UTF-8 character (bytes of an incomplete character, and
// SentencePiece byte-fallback runs, are held back until they resolve), and the concatenation
// of all deltas plus finish() equals Tokenizer::decode of the same ids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tokenizer/decoder.h"
#include "tokenizer/tokenizer.h"

namespace optimate {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer,
                                  bool skip_special_tokens = true);

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
  tokenizer::DecodeStream stream_;
};

}  // namespace optimate
