// Turns one request's engine outputs into its HTTP response: SSE chunks as they come, or one
// JSON body when every choice has finished; records the request's latency metrics.
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
  int64_t n = 1;
  int64_t num_prompt_tokens = 0;
  int64_t max_tokens = 0;
  int64_t priority = 0;  // as the client sent it (metric label)
};

class GenerationStream {
 public:
  GenerationStream(std::shared_ptr<HttpExchange> exchange, ResponseMeta meta,
                   StreamSettings settings, metrics::ServingMetrics* metrics, const Clock& clock);

  void on_outputs(const std::vector<GenerationOutput>& outputs);
  bool done() const { return num_finished_ == settings_.n; }

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
