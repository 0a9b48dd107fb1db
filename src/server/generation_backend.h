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

#include "core/priority_order.h"
#include "core/request_metadata.h"
#include "core/sampling_params.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_response.h"
#include "server/tool_call_parser.h"
#include "structured/grammar_spec.h"
#include "tokenizer/chat_template.h"

namespace optimate::server {

struct ModelInfo {
  std::string id;  // the served model name
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;
  std::vector<int64_t> eos_token_ids;  // what ends a sequence unless ignore_eos
  int64_t created = 0;  // unix seconds the model was loaded
  // What routers read to register a replica (/server_info, /model_info).
  std::string model_path;      // --model as given
  std::string tokenizer_path;  // --tokenizer, else the model path
  std::string model_type;      // Hugging Face model_type: "llama", "mistral", "qwen2"
  std::vector<std::string> architectures;  // Hugging Face class names: "LlamaForCausalLM"
  int64_t block_size = 0;      // tokens per KV block
  int64_t num_kv_blocks = 0;
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  // How tool calls read in the chat template's format (tool_choice "auto").
  ToolParser tool_parser = ToolParser::kHermes;
  // Which way the clients' priority values point (--priority-order).
  PriorityOrder priority_order = PriorityOrder::kHigherFirst;
};

// A replica's load now, as routers ask for it (GET /get_load).
struct LoadReport {
  int64_t num_running = 0;  // sequences being generated
  int64_t num_waiting = 0;  // sequences queued, submitted ones not yet seen by the scheduler too
  int64_t kv_used_tokens = 0;  // KV-cache slots held by sequences (whole blocks)
  // Tokens the queued sequences bring: their prompts (and what a preempted one generated),
  // which they will need in the KV cache once they run.
  int64_t waiting_tokens = 0;
};

struct BackendRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;  // max_tokens resolved
  RequestMetadata metadata;  // the client's priority converted to the engine's order
  bool tokens_as_ids = false;  // logprob tokens written "token_id:ID" (return_tokens_as_token_ids)
};

// One choice's progress since its previous output.
struct GenerationOutput {
  int64_t index = 0;
  std::string text;                    // complete UTF-8
  std::vector<LogprobEntry> logprobs;  // one per new token when logprobs were asked for
  std::vector<int32_t> token_ids;      // the new tokens
  // With prompt logprobs, on the choice's first output: one per prompt token, the first unknown.
  std::vector<LogprobEntry> prompt_logprobs;
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
  // The vocabulary's spelling of a token, as transformers' convert_ids_to_tokens gives it
  // ("\u0120world" in a byte-level vocabulary, not " world"): vLLM's /tokenize token_strs.
  virtual std::string token_string(int32_t id) const = 0;
  virtual std::string render_chat(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                  const ChatRenderOptions& options = {}) const = 0;
  // A grammar over the model's vocabulary; ApiError(400) naming spec.field when it cannot be
  // compiled or the binary has no grammar engine.
  virtual std::shared_ptr<const TokenConstraint> compile_grammar(const structured::GrammarSpec& spec) = 0;

  // Queues a request; outputs reach `sink` until every choice has finished (an aborted request
  // finishes with reason "abort"). Throws ApiError or Error for requests the engine refuses.
  virtual void submit(BackendRequest request, OutputSink sink) = 0;
  // Ends a request early; harmless for unknown or finished ids. Must not block.
  virtual void abort(const std::string& request_id) = 0;

  virtual bool healthy() const = 0;
  virtual LoadReport load() const = 0;
  virtual int64_t num_waiting() const = 0;  // requests queued, not yet running
  virtual int64_t num_unfinished() const = 0;

  // Run-time optimizer control (GET /v1/optimizers, PUT /v1/optimizers/NAME).
  virtual Json list_optimizers() const = 0;
  virtual Json update_optimizer(const std::string& name, const Json& body) = 0;

  // Forgets every cached prompt prefix (POST /flush_cache, /reset_prefix_cache); requests in
  // progress keep their KV blocks. Returns once the engine has done it.
  virtual void reset_prefix_cache() = 0;

  // POST /v1/optimizers/rollback: every optimizer back to the baseline; POST
  // /v1/optimizers/restore: back to the last good configuration. A backend without optimizers
  // answers 501.
  virtual Json rollback_optimizers() { throw ApiError(501, "This backend has no optimizers to roll back."); }
  virtual Json restore_optimizers() { throw ApiError(501, "This backend has no optimizers to restore."); }
  // The active configuration: its version and the last reload's result (null: not tracked).
  virtual Json config_status() const { return nullptr; }
};

}  // namespace optimate::server
