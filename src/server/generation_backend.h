// What the HTTP API needs from the model side: tokenizer, chat template, and an engine that
// takes requests and streams their outputs back. The production implementation wraps the
// AsyncEngine and the model's tokenizer (engine_backend.h); tests use a scripted fake.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/sampling_params.h"
#include "server/json_fields.h"
#include "server/openai_response.h"
#include "tokenizer/chat_template.h"

namespace optimate::server {

struct ModelInfo {
  std::string id;  // the served model name
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;
  int64_t created = 0;  // unix seconds the model was loaded
};

struct BackendRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;  // max_tokens resolved
  int64_t priority = 0;   // the engine's order: larger runs first
};

// One choice's progress since its previous output.
struct GenerationOutput {
  int64_t index = 0;
  std::string text;                    // complete UTF-8
  std::vector<LogprobEntry> logprobs;  // one per new token when logprobs were asked for
  int64_t num_new_tokens = 0;
  bool finished = false;
  std::string finish_reason;  // "stop", "length" or "abort" once finished
  Json stop_reason;           // null, the stop token id or the stop string
  int64_t num_prompt_tokens = 0;
  double queue_s = -1;  // arrival to first scheduling, once known (-1: not yet)
};

// Receives outputs on the engine's thread: must be quick and must not block.
using OutputSink = std::function<void(std::vector<GenerationOutput>)>;

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;

  virtual const ModelInfo& model() const = 0;
  virtual std::vector<int32_t> tokenize(std::string_view text, bool add_special_tokens) const = 0;
  virtual std::string detokenize(std::span<const int32_t> ids) const = 0;
  virtual std::string render_chat(std::span<const ChatMessage> messages,
                                  bool add_generation_prompt) const = 0;

  // Queues a request; outputs reach `sink` until every choice has finished (an aborted request
  // finishes with reason "abort"). Throws ApiError or Error for requests the engine refuses.
  virtual void submit(BackendRequest request, OutputSink sink) = 0;
  // Ends a request early; harmless for unknown or finished ids. Must not block.
  virtual void abort(const std::string& request_id) = 0;

  virtual bool healthy() const = 0;
  virtual int64_t num_waiting() const = 0;  // requests queued, not yet running
  virtual int64_t num_unfinished() const = 0;

  // Run-time optimizer control (GET /v1/optimizers, PUT /v1/optimizers/NAME).
  virtual Json list_optimizers() const = 0;
  virtual Json update_optimizer(const std::string& name, const Json& body) = 0;
};

}  // namespace optimate::server
