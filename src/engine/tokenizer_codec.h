// The engine's TextCodec over the model's own tokenizer: prompts encoded as Hugging Face does
// (with the tokenizer's BOS/EOS rules), generated ids decoded by the UTF-8 safe incremental
// detokenizer.
#pragma once

#include <memory>

#include "engine/text_codec.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace optimate {

class TokenizerCodec final : public TextCodec {
 public:
  explicit TokenizerCodec(std::shared_ptr<const Tokenizer> tokenizer);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::unique_ptr<IncrementalDecoder> make_decoder(std::span<const int32_t> prompt_ids,
                                                   const DecodeOptions& options) const override;

  const std::shared_ptr<const Tokenizer>& tokenizer() const { return tokenizer_; }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
};

// The tokenizer that ships with a loaded model: GGUF metadata, or the Hugging Face directory's
// tokenizer.json. Throws Error naming the model when it has none.
std::shared_ptr<const Tokenizer> load_model_tokenizer(const LoadedModel& model);

}  // namespace optimate
