// Turns one request's engine outputs into its HTTP response: SSE chunks as they come, or one
// JSON body when every choice has finished; records the request's latency metrics.
//
// A /v1/completions request may carry several prompts; as in vLLM, prompt p's n choices are
// choices p * n .. p * n + n - 1 of one response, and usage sums over the prompts. With
// best_of > n the engine draws best_of sequences per prompt and the n with the highest
// cumulative logprob are returned (best_of equals n when streaming).
//
// Echo puts the prompt (completions) or the last message (chat) before a choice's text, and
// with completions' logprobs the prompt's token logprobs before its own. With tools, each
// choice's text goes through a ToolCallStream: calls leave as tool_calls, the rest as content.
//
// on_outputs() runs on the exchange's strand, so a stream needs no lock of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "metrics/serving_metrics.h"
#include "server/generation_backend.h"
#include "server/http_exchange.h"
#include "server/openai_response.h"
#include "server/tool_call_parser.h"

namespace optimate::server {

enum class ApiKind { kCompletion, kChat };

struct StreamSettings {
  ApiKind kind = ApiKind::kCompletion;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage_stats = false;
  bool want_logprobs = false;
  int64_t n = 1;        // choices per prompt returned
  int64_t best_of = 1;  // sequences per prompt generated (>= n)
  std::vector<int64_t> num_prompt_tokens;  // one entry per prompt
  int64_t max_tokens = 0;
  EnginePriority priority;  // metrics map it to a bounded label
  // When the request arrived (TTFT and E2E count from it, a grammar's compile included) and
  // when it reached the engine (its queue time counts from it); -1: when the stream is made.
  int64_t arrival_ns = -1;
  int64_t submit_ns = -1;
  // Echo: text put before each choice of prompt p (empty: no echo).
  std::vector<std::string> echo_text;
  bool echo_logprobs = false;  // completions: the prompt's logprobs before the choice's
  bool echo_only = false;      // echo with max_tokens 0: the generated token is not returned
  bool want_prompt_logprobs = false;  // vLLM's prompt_logprobs field
  bool return_token_ids = false;
  std::vector<std::vector<int32_t>> prompt_token_ids;  // with return_token_ids
  std::optional<ToolRequest> tools;  // chat with tools (tool_choice other than none)
  ToolParser tool_parser = ToolParser::kHermes;
  int64_t num_prompts() const { return static_cast<int64_t>(num_prompt_tokens.size()); }
  int64_t num_sequences() const { return best_of * num_prompts(); }
};

class GenerationStream {
 public:
  GenerationStream(std::shared_ptr<HttpExchange> exchange, ResponseMeta meta,
                   StreamSettings settings, metrics::ServingMetrics* metrics, const Clock& clock);

  void on_outputs(const std::vector<GenerationOutput>& outputs);
  bool done() const { return num_finished_ == settings_.num_sequences(); }

 private:
  struct Choice {
    bool started = false;
    bool finished = false;
    std::string text;  // whole text (non-streaming)
    int64_t text_bytes = 0;  // bytes so far (completions logprob offsets)
    std::vector<LogprobEntry> logprobs;
    std::vector<LogprobEntry> prompt_logprobs;
    std::vector<int32_t> token_ids;
    double cumulative_logprob = 0.0;
    std::string finish_reason;
    Json stop_reason;
    int64_t num_tokens = 0;
    double queue_s = -1;
    int64_t first_token_ns = -1;  // when this choice's first and latest tokens arrived
    int64_t last_token_ns = -1;
    std::unique_ptr<ToolCallStream> tools;  // streaming with tools
  };

  // What a choice shows of one output: echo first, the generated part unless echo_only.
  void stream_delta(Choice& choice, const GenerationOutput& out);
  void complete();
  void send_response(const UsageCounts& usage);
  // The prompt's logprobs as echoed (completions) and as vLLM's prompt_logprobs field.
  std::vector<LogprobEntry> echoed_prompt_logprobs(const Choice& choice) const;
  // The returned sequences of every prompt, in response order (best_of's selection).
  std::vector<size_t> returned_sequences() const;
  std::string finish_reason(const Choice& choice, bool called_tools) const;
  void record_timing(Choice& choice, const GenerationOutput& out);
  // vLLM's per-request phases: queued, prefill (scheduled to first token), decode (first to
  // last token) and inference (scheduled to last token).
  metrics::FinishedRequestStats finished_stats(const Choice& choice, size_t prompt, double e2e_s) const;
  UsageCounts usage() const;

  std::shared_ptr<HttpExchange> exchange_;
  ResponseMeta meta_;
  StreamSettings settings_;
  metrics::ServingMetrics* metrics_;
  const Clock& clock_;
  int64_t arrival_ns_;
  int64_t submit_ns_;
  int64_t first_token_ns_ = -1;
  int64_t last_token_ns_ = -1;
  std::vector<Choice> choices_;  // one per sequence
  int64_t num_finished_ = 0;
};

}  // namespace optimate::server
