#include "tokenizer/incremental_detokenizer.h"

namespace optimate {

IncrementalDetokenizer::IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens,
                                               bool spaces_between_special_tokens)
    : tokenizer_(std::move(tokenizer)),
      skip_special_tokens_(skip_special_tokens),
      raw_added_runs_(!spaces_between_special_tokens && !skip_special_tokens),
      stream_(tokenizer_->decoder()) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  const std::string& token = tokenizer_->id_to_token(id);
  std::string out;
  if (skip_special_tokens_ && tokenizer_->is_special(id)) return out;
  stream_.push(token, out);
  if (raw_added_runs_) {
    const std::string* added = tokenizer_->added_content(id);
    if (added && last_added_) out = *added;
    last_added_ = added != nullptr;
  }
  return out;
}

std::string IncrementalDetokenizer::finish() {
  std::string out;
  stream_.finish(out);
  return out;
}

}  // namespace optimate
