// Turns one request's engine outputs into its HTTP response: SSE chunks as they come, or one
// JSON body when every choice has finished; records the request's latency metrics.
//
// A /v1/completions request may carry several prompts; as in vLLM, prompt p's n choices are
// choices p * n .. p * n + n - 1 of one response, and usage sums over the prompts.
//
// on_outputs() runs on the exchange's strand, so a stream needs no lock of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "metrics/serving_metrics.h"
#include "server/generation_backend.h"
#include "server/http_exchange.h"
#include "server/openai_response.h"

namespace optimate::server {

enum class ApiKind { kCompletion, kChat };

struct StreamSettings {
  ApiKind kind = ApiKind::kCompletion;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage_stats = false;
  bool want_logprobs = false;
  int64_t n = 1;  // choices per prompt
  std::vector<int64_t> num_prompt_tokens;  // one entry per prompt
  int64_t max_tokens = 0;
  int64_t priority = 0;  // in the engine's order (metrics map it to a bounded label)
  int64_t num_choices() const { return n * static_cast<int64_t>(num_prompt_tokens.size()); }
};

class GenerationStream {
 public:
  GenerationStream(std::shared_ptr<HttpExchange> exchange, ResponseMeta meta,
                   StreamSettings settings, metrics::ServingMetrics* metrics, const Clock& clock);

  void on_outputs(const std::vector<GenerationOutput>& outputs);
  bool done() const { return num_finished_ == settings_.num_choices(); }

 private:
  struct Choice {
    bool started = false;
    bool finished = false;
    std::string text;  // whole text (non-streaming)
    int64_t text_bytes = 0;  // bytes so far (completions logprob offsets)
    std::vector<LogprobEntry> logprobs;
    std::string finish_reason;
    Json stop_reason;
    int64_t num_tokens = 0;
    double queue_s = -1;
  };

  void stream_delta(Choice& choice, const GenerationOutput& out);
  void complete();
  void record_timing(const GenerationOutput& out);
  UsageCounts usage() const;

  std::shared_ptr<HttpExchange> exchange_;
  ResponseMeta meta_;
  StreamSettings settings_;
  metrics::ServingMetrics* metrics_;
  const Clock& clock_;
  int64_t arrival_ns_;
  int64_t first_token_ns_ = -1;
  int64_t last_token_ns_ = -1;
  std::vector<Choice> choices_;
  int64_t num_finished_ = 0;
};

}  // namespace optimate::server
