// Turns the scheduler's token deltas into what a client sees: decoded text deltas and stop
// strings found across token boundaries (vLLM's rules: the matched stop string is cut from the
// text unless include_stop_str_in_output; strings count once more than min_tokens tokens are
// out; while a sequence runs the last len(stop) - 1 bytes are held back, never part of a UTF-8
// character, so a stop string is never streamed and then retracted).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "core/sampling_params.h"
#include "engine/text_codec.h"
#include "sched/request_output.h"

namespace optimate {

class OutputProcessor {
 public:
  explicit OutputProcessor(std::shared_ptr<const TextCodec> codec) : codec_(std::move(codec)) {}

  void add(const std::string& request_id, int64_t index, std::span<const int32_t> prompt_ids,
           std::shared_ptr<const SamplingParams> params);
  // Fills out.text; returns true when a stop string ended a sequence the scheduler still runs
  // (out is then marked finished with the stop string as stop_reason; the caller frees the
  // sequence). A string completed by a last token that ended it by length turns its
  // finish_reason to stop and returns false.
  bool process(sched::RequestOutput& out);
  void remove(const std::string& request_id, int64_t index);
  bool empty() const { return seqs_.empty(); }

 private:
  struct Seq {
    std::shared_ptr<const SamplingParams> params;
    std::unique_ptr<IncrementalDecoder> decoder;
    std::string text;     // everything decoded so far (after any stop-string cut)
    size_t emitted = 0;   // bytes of text already returned
    size_t look_back = 0; // longest stop string - 1, in bytes: where a match may start
    size_t hold_back = 0; // the same unless the stop string stays in the output (then 0)
  };

  std::shared_ptr<const TextCodec> codec_;
  std::map<std::pair<std::string, int64_t>, Seq> seqs_;
};

}  // namespace optimate
