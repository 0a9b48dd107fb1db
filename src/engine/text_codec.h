// What the engine needs from a tokenizer: prompts to ids, and generated ids to text one token
// at a time (a token may end mid UTF-8 character; the decoder holds bytes back until the
// character is whole).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace optimate {

// How generated ids become text (vLLM's sampling parameters of these names).
struct DecodeOptions {
  bool skip_special_tokens = true;
  // false, with skip_special_tokens false: an added token right after another added token is
  // written as its content alone, whatever the decoder would put before it (vLLM's rule).
  bool spaces_between_special_tokens = true;
};

class IncrementalDecoder {
 public:
  virtual ~IncrementalDecoder() = default;
  // Text that `token_id` completes; may be empty while a character is incomplete.
  virtual std::string push(int32_t token_id) = 0;
  // Text still held back when the sequence ends (an incomplete character, as U+FFFD).
  virtual std::string finish() { return {}; }
};

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // A decoder for the tokens generated after `prompt_ids` (spacing may depend on them).
  virtual std::unique_ptr<IncrementalDecoder> make_decoder(std::span<const int32_t> prompt_ids,
                                                           const DecodeOptions& options) const = 0;
};

}  // namespace optimate
