#include "server/generation_stream.h"

namespace optimate::server {

GenerationStream::GenerationStream(std::shared_ptr<HttpExchange> exchange, ResponseMeta meta,
                                   StreamSettings settings, metrics::ServingMetrics* metrics,
                                   const Clock& clock)
    : exchange_(std::move(exchange)),
      meta_(std::move(meta)),
      settings_(settings),
      metrics_(metrics),
      clock_(clock),
      arrival_ns_(clock.now_ns()),
      choices_(static_cast<size_t>(settings.num_choices())) {}

UsageCounts GenerationStream::usage() const {
  UsageCounts u;
  for (int64_t tokens : settings_.num_prompt_tokens) u.prompt_tokens += tokens;
  for (const auto& c : choices_) u.completion_tokens += c.num_tokens;
  return u;
}

void GenerationStream::record_timing(const GenerationOutput& out) {
  if (!metrics_ || out.num_new_tokens == 0) return;
  int64_t now = clock_.now_ns();
  if (last_token_ns_ < 0) {
    first_token_ns_ = now;
    metrics_->record_first_token(static_cast<double>(now - arrival_ns_) * 1e-9);
  } else {
    metrics_->record_inter_token(static_cast<double>(now - last_token_ns_) * 1e-9);
  }
  last_token_ns_ = now;
}

void GenerationStream::on_outputs(const std::vector<GenerationOutput>& outputs) {
  for (const auto& out : outputs) {
    if (out.index < 0 || out.index >= settings_.num_choices()) continue;
    Choice& c = choices_[static_cast<size_t>(out.index)];
    if (c.finished) continue;
    record_timing(out);
    c.num_tokens += out.num_new_tokens;
    if (out.queue_s >= 0) c.queue_s = out.queue_s;
    if (out.finished) {
      c.finished = true;
      c.finish_reason = out.finish_reason;
      c.stop_reason = out.stop_reason;
      ++num_finished_;
    }
    if (settings_.stream) {
      stream_delta(c, out);
    } else {
      c.text += out.text;
      c.logprobs.insert(c.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
    }
  }
  if (done()) complete();
}

void GenerationStream::stream_delta(Choice& c, const GenerationOutput& out) {
  // Benchmark clients take TTFT at the first chunk with choices: never send one without
  // content, except the one that finishes the choice.
  if (out.text.empty() && out.logprobs.empty() && !out.finished) return;
  ChoiceDelta d;
  d.index = out.index;
  d.text = out.text;
  d.logprobs = out.logprobs;
  d.want_logprobs = settings_.want_logprobs;
  d.text_offset = c.text_bytes;
  c.text_bytes += static_cast<int64_t>(out.text.size());
  if (out.finished) {
    d.finish_reason = c.finish_reason;
    d.stop_reason = c.stop_reason;
  }
  UsageCounts u = usage();
  const UsageCounts* per_chunk = settings_.include_usage && settings_.continuous_usage_stats ? &u : nullptr;
  std::string json = settings_.kind == ApiKind::kChat ? chat_chunk(meta_, d, !c.started, per_chunk)
                                                      : completion_chunk(meta_, d, per_chunk);
  c.started = true;
  exchange_->send_event(sse_event(json));
}

void GenerationStream::complete() {
  UsageCounts u = usage();
  // Metrics first: a client that reads /metrics once its response is in sees this request.
  if (metrics_) {
    double e2e_s = static_cast<double>(clock_.now_ns() - arrival_ns_) * 1e-9;
    for (size_t i = 0; i < choices_.size(); ++i) {
      const Choice& c = choices_[i];
      metrics::FinishedRequestStats f;
      f.finish_reason = c.finish_reason;
      f.priority = settings_.priority;
      f.num_prompt_tokens = settings_.num_prompt_tokens[i / static_cast<size_t>(settings_.n)];
      f.num_generation_tokens = c.num_tokens;
      f.max_tokens = settings_.max_tokens;
      f.n = settings_.n;
      f.e2e_s = e2e_s;
      f.queue_s = c.queue_s;
      metrics_->record_finished(f);
    }
    // vLLM's TPOT: decode time over the tokens after the first.
    if (u.completion_tokens > 1 && first_token_ns_ >= 0)
      metrics_->record_time_per_output_token(static_cast<double>(last_token_ns_ - first_token_ns_) *
                                             1e-9 / static_cast<double>(u.completion_tokens - 1));
  }
  if (settings_.stream) {
    if (settings_.include_usage) exchange_->send_event(sse_event(usage_chunk(meta_, u, settings_.kind == ApiKind::kChat)));
    exchange_->send_event(std::string(kSseDone));
    exchange_->finish_events();
    return;
  }
  std::vector<ChoiceDelta> all;
  for (size_t i = 0; i < choices_.size(); ++i) {
    auto& c = choices_[i];
    ChoiceDelta d;
    d.index = static_cast<int64_t>(i);
    d.text = std::move(c.text);
    d.logprobs = std::move(c.logprobs);
    d.want_logprobs = settings_.want_logprobs;
    d.finish_reason = c.finish_reason;
    d.stop_reason = c.stop_reason;
    all.push_back(std::move(d));
  }
  exchange_->send_json(200, settings_.kind == ApiKind::kChat ? chat_response(meta_, all, u)
                                                             : completion_response(meta_, all, u));
}

}  // namespace optimate::server
