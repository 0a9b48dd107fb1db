#include "engine/tokenizer_codec.h"

#include "core/error.h"
#include "tokenizer/incremental_detokenizer.h"

namespace optimate {
namespace {

class DetokenizerDecoder final : public IncrementalDecoder {
 public:
  DetokenizerDecoder(std::shared_ptr<const Tokenizer> tokenizer, std::span<const int32_t> prompt_ids,
                     const DecodeOptions& options)
      : detokenizer_(tokenizer, options.skip_special_tokens, options.spaces_between_special_tokens) {
    // SentencePiece decoding drops the leading space of a whole text; generated text continues
    // the prompt, so the stream first sees the prompt's last ordinary token, whose text is
    // discarded, and keeps the space the first generated word starts with (as vLLM does).
    if (tokenizer->decoder().strip_leading_spaces == 0) return;
    for (auto it = prompt_ids.rbegin(); it != prompt_ids.rend(); ++it) {
      if (*it < 0 || *it >= tokenizer->vocab_size() || tokenizer->is_special(*it)) continue;
      detokenizer_.push(*it);
      detokenizer_.finish();
      break;
    }
  }
  std::string push(int32_t token_id) override { return detokenizer_.push(token_id); }
  std::string finish() override { return detokenizer_.finish(); }

 private:
  IncrementalDetokenizer detokenizer_;
};

}  // namespace

TokenizerCodec::TokenizerCodec(std::shared_ptr<const Tokenizer> tokenizer)
    : tokenizer_(std::move(tokenizer)) {
  OPTIMATE_CHECK(tokenizer_ != nullptr, "TokenizerCodec without a tokenizer");
}

std::vector<int32_t> TokenizerCodec::encode(std::string_view text) const {
  return tokenizer_->encode(text, /*add_special_tokens=*/true);
}

std::unique_ptr<IncrementalDecoder> TokenizerCodec::make_decoder(std::span<const int32_t> prompt_ids,
                                                                 const DecodeOptions& options) const {
  return std::make_unique<DetokenizerDecoder>(tokenizer_, prompt_ids, options);
}

std::shared_ptr<const Tokenizer> load_model_tokenizer(const LoadedModel& model) {
  if (model.gguf) return Tokenizer::from_gguf(*model.gguf);
  if (!model.hf_dir.empty()) return Tokenizer::load(model.hf_dir);
  fail(ErrorCode::kNotFound, "model '{}' comes with no tokenizer", model.path);
}

}  // namespace optimate
