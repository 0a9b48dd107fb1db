#include "engine/output_processor.h"

#include <algorithm>

namespace optimate {

void OutputProcessor::add(const std::string& request_id, int64_t index,
                          std::span<const int32_t> prompt_ids,
                          std::shared_ptr<const SamplingParams> params) {
  Seq seq;
  if (codec_)
    seq.decoder = codec_->make_decoder(prompt_ids, {params->skip_special_tokens, params->spaces_between_special_tokens});
  for (const auto& s : params->stop) seq.look_back = std::max(seq.look_back, s.size() - 1);
  // A stop string kept in the output is never retracted: nothing to hold back (as vLLM).
  if (!params->include_stop_str_in_output) seq.hold_back = seq.look_back;
  seq.params = std::move(params);
  seqs_[{request_id, index}] = std::move(seq);
}

void OutputProcessor::remove(const std::string& request_id, int64_t index) {
  seqs_.erase({request_id, index});
}

bool OutputProcessor::process(sched::RequestOutput& out) {
  auto it = seqs_.find({out.request_id, out.index});
  if (it == seqs_.end()) return false;
  Seq& seq = it->second;
  const SamplingParams& p = *seq.params;
  bool stopped_by_string = false;
  if (seq.decoder) {
    const size_t search_from = seq.text.size();
    for (size_t i = 0; i < out.new_token_ids.size(); ++i) {
      const bool last = i + 1 == out.new_token_ids.size();
      std::string piece = seq.decoder->push(out.new_token_ids[i]);
      // The token that triggered a token-level stop (EOS, stop_token_ids) is not text.
      if (last && out.finish_reason == sched::FinishReason::kStop && !p.include_stop_str_in_output)
        piece.clear();
      seq.text += piece;
    }
    if (out.finished) seq.text += seq.decoder->finish();
    // Stop strings count from past min_tokens (as vLLM), and also in the text of a last token
    // that ended the sequence by length: the string wins, as in vLLM.
    const bool was_finished = out.finished;
    if ((!out.finished || out.finish_reason == sched::FinishReason::kLength) && !p.stop.empty() &&
        out.usage.completion_tokens > p.min_tokens) {
      // A match may start in text already held back from earlier tokens.
      const size_t from = search_from > seq.look_back ? search_from - seq.look_back : 0;
      size_t best = std::string::npos;
      const std::string* match = nullptr;
      for (const auto& s : p.stop) {
        const size_t pos = seq.text.find(s, from);
        if (pos != std::string::npos && pos < best) {
          best = pos;
          match = &s;
        }
      }
      if (match) {
        seq.text.resize(p.include_stop_str_in_output ? best + match->size() : best);
        out.finished = true;
        out.finish_reason = sched::FinishReason::kStop;
        out.stop_reason = *match;
        stopped_by_string = !was_finished;  // the scheduler still runs it
      }
    }
    size_t visible = seq.text.size();
    if (!out.finished) {
      visible = seq.text.size() > seq.hold_back ? seq.text.size() - seq.hold_back : 0;
      // Held back by bytes: never cut a UTF-8 character in two.
      while (visible > seq.emitted && visible < seq.text.size() &&
             (static_cast<unsigned char>(seq.text[visible]) & 0xC0) == 0x80)
        --visible;
    }
    visible = std::max(visible, seq.emitted);
    out.text = seq.text.substr(seq.emitted, visible - seq.emitted);
    seq.emitted = visible;
  }
  if (out.finished) seqs_.erase(it);
  return stopped_by_string;
}

}  // namespace optimate
