#include "server/generation_stream.h"

#include <algorithm>
#include <numeric>

namespace optimate::server {

namespace {

void append(std::vector<LogprobEntry>& to, const std::vector<LogprobEntry>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

Json tool_calls_json(const std::vector<ToolCall>& calls) {
  Json out = Json::array();
  for (const ToolCall& c : calls)
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

}  // namespace

GenerationStream::GenerationStream(std::shared_ptr<HttpExchange> exchange, ResponseMeta meta,
                                   StreamSettings settings, metrics::ServingMetrics* metrics,
                                   const Clock& clock)
    : exchange_(std::move(exchange)),
      meta_(std::move(meta)),
      settings_(std::move(settings)),
      metrics_(metrics),
      clock_(clock),
      arrival_ns_(settings_.arrival_ns >= 0 ? settings_.arrival_ns : clock.now_ns()),
      submit_ns_(settings_.submit_ns >= 0 ? settings_.submit_ns : arrival_ns_),
      choices_(static_cast<size_t>(settings_.num_sequences())) {
  if (settings_.stream && settings_.tools)
    for (Choice& c : choices_) c.tools = std::make_unique<ToolCallStream>(*settings_.tools, settings_.tool_parser);
}

UsageCounts GenerationStream::usage() const {
  UsageCounts u;
  for (int64_t tokens : settings_.num_prompt_tokens) u.prompt_tokens += tokens;
  for (const auto& c : choices_) u.completion_tokens += c.num_tokens;
  return u;
}

void GenerationStream::record_timing(Choice& choice, const GenerationOutput& out) {
  if (!metrics_ || out.num_new_tokens == 0) return;
  int64_t now = clock_.now_ns();
  if (choice.first_token_ns < 0) choice.first_token_ns = now;
  choice.last_token_ns = now;
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
    if (out.index < 0 || out.index >= settings_.num_sequences()) continue;
    Choice& c = choices_[static_cast<size_t>(out.index)];
    if (c.finished) continue;
    record_timing(c, out);
    // echo with max_tokens 0: the one token drawn is not the client's (vLLM counts none).
    if (!settings_.echo_only) c.num_tokens += out.num_new_tokens;
    if (out.queue_s >= 0) c.queue_s = out.queue_s;
    if (!out.prompt_logprobs.empty()) c.prompt_logprobs = out.prompt_logprobs;
    for (const auto& e : out.logprobs) c.cumulative_logprob += e.chosen.logprob;
    if (out.finished) {
      c.finished = true;
      c.finish_reason = out.finish_reason;
      c.stop_reason = out.stop_reason;
      ++num_finished_;
    }
    if (settings_.stream) {
      stream_delta(c, out);
    } else if (!settings_.echo_only) {
      c.text += out.text;
      append(c.logprobs, out.logprobs);
      c.token_ids.insert(c.token_ids.end(), out.token_ids.begin(), out.token_ids.end());
    }
  }
  if (done()) complete();
}

std::vector<LogprobEntry> GenerationStream::echoed_prompt_logprobs(const Choice& c) const {
  return settings_.echo_logprobs ? c.prompt_logprobs : std::vector<LogprobEntry>{};
}

std::string GenerationStream::finish_reason(const Choice& c, bool called_tools) const {
  if (called_tools && settings_.tools && settings_.tools->choice != ToolChoice::kNamed) return "tool_calls";
  return c.finish_reason;
}

void GenerationStream::stream_delta(Choice& c, const GenerationOutput& out) {
  const size_t prompt = static_cast<size_t>(out.index / settings_.best_of);
  ChoiceDelta d;
  d.index = out.index;
  d.want_logprobs = settings_.want_logprobs;
  if (!settings_.echo_only) {
    d.text = out.text;
    d.logprobs = out.logprobs;
  }
  if (!c.started && prompt < settings_.echo_text.size()) {
    d.text = settings_.echo_text[prompt] + d.text;
    std::vector<LogprobEntry> logprobs = echoed_prompt_logprobs(c);
    append(logprobs, d.logprobs);
    d.logprobs = std::move(logprobs);
  }
  if (c.tools) {
    ToolDelta td = c.tools->push(d.text);
    if (out.finished) {
      ToolDelta rest = c.tools->finish();
      td.content += rest.content;
      for (auto& item : rest.tool_calls) td.tool_calls.push_back(std::move(item));
    }
    d.text = std::move(td.content);
    if (!td.tool_calls.empty()) d.tool_calls = std::move(td.tool_calls);
  }
  // Benchmark clients take TTFT at the first chunk with choices: never send one without
  // content, except the one that finishes the choice.
  if (d.text.empty() && d.logprobs.empty() && d.tool_calls.is_null() && !out.finished) return;
  d.text_offset = c.text_bytes;
  c.text_bytes += static_cast<int64_t>(d.text.size());
  if (out.finished) {
    d.finish_reason = finish_reason(c, c.tools && !c.tools->calls().empty());
    d.stop_reason = c.stop_reason;
  }
  if (settings_.return_token_ids) {
    if (!c.started && prompt < settings_.prompt_token_ids.size()) d.prompt_token_ids = &settings_.prompt_token_ids[prompt];
    c.token_ids = settings_.echo_only ? std::vector<int32_t>{} : out.token_ids;
    d.token_ids = &c.token_ids;
  }
  // As vLLM: each chunk's usage is its own choice's tokens over its own prompt's.
  const UsageCounts u{settings_.num_prompt_tokens[prompt], c.num_tokens};
  const UsageCounts* per_chunk = settings_.include_usage && settings_.continuous_usage_stats ? &u : nullptr;
  std::string json = settings_.kind == ApiKind::kChat ? chat_chunk(meta_, d, !c.started, per_chunk)
                                                      : completion_chunk(meta_, d, per_chunk);
  c.started = true;
  exchange_->send_event(sse_event(json));
}

std::vector<size_t> GenerationStream::returned_sequences() const {
  std::vector<size_t> out;
  const size_t best_of = static_cast<size_t>(settings_.best_of);
  for (size_t p = 0; p < static_cast<size_t>(settings_.num_prompts()); ++p) {
    std::vector<size_t> seqs(best_of);
    std::iota(seqs.begin(), seqs.end(), p * best_of);
    if (settings_.best_of > settings_.n)
      std::stable_sort(seqs.begin(), seqs.end(), [&](size_t a, size_t b) {
        return choices_[a].cumulative_logprob > choices_[b].cumulative_logprob;
      });
    out.insert(out.end(), seqs.begin(), seqs.begin() + settings_.n);
  }
  return out;
}

void GenerationStream::complete() {
  UsageCounts u = usage();
  // Metrics first: a client that reads /metrics once its response is in sees this request.
  if (metrics_) {
    double e2e_s = static_cast<double>(clock_.now_ns() - arrival_ns_) * 1e-9;
    for (size_t i = 0; i < choices_.size(); ++i)
      metrics_->record_finished(finished_stats(choices_[i], i / static_cast<size_t>(settings_.best_of), e2e_s));
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
  send_response(u);
}

metrics::FinishedRequestStats GenerationStream::finished_stats(const Choice& c, size_t prompt, double e2e_s) const {
  metrics::FinishedRequestStats f;
  f.finish_reason = c.finish_reason;
  f.priority = settings_.priority;
  f.num_prompt_tokens = settings_.num_prompt_tokens[prompt];
  f.num_generation_tokens = c.num_tokens;
  f.max_tokens = settings_.max_tokens;
  f.n = settings_.n;
  f.e2e_s = e2e_s;
  f.queue_s = c.queue_s;
  if (c.queue_s >= 0 && c.first_token_ns >= 0) {
    // The engine measures the queue from its own arrival, the submit; the tokens are timed here.
    const int64_t scheduled_ns = submit_ns_ + static_cast<int64_t>(c.queue_s * 1e9);
    auto seconds = [](int64_t from_ns, int64_t to_ns) { return std::max<double>(0.0, static_cast<double>(to_ns - from_ns) * 1e-9); };
    f.prefill_s = seconds(scheduled_ns, c.first_token_ns);
    f.decode_s = seconds(c.first_token_ns, c.last_token_ns);
    f.inference_s = seconds(scheduled_ns, c.last_token_ns);
  }
  return f;
}

void GenerationStream::send_response(const UsageCounts& usage) {
  const bool chat = settings_.kind == ApiKind::kChat;
  const std::vector<size_t> order = returned_sequences();
  std::vector<ChoiceDelta> all;
  std::vector<std::vector<LogprobEntry>> prompt_logprobs(order.size());
  for (size_t j = 0; j < order.size(); ++j) {
    Choice& c = choices_[order[j]];
    const size_t prompt = order[j] / static_cast<size_t>(settings_.best_of);
    ChoiceDelta d;
    d.index = static_cast<int64_t>(j);
    d.text = prompt < settings_.echo_text.size() ? settings_.echo_text[prompt] + c.text : std::move(c.text);
    d.want_logprobs = settings_.want_logprobs;
    if (settings_.want_logprobs) {
      d.logprobs = echoed_prompt_logprobs(c);
      append(d.logprobs, c.logprobs);
    }
    bool called = false;
    if (settings_.tools) {
      ParsedOutput parsed = parse_tool_output(*settings_.tools, settings_.tool_parser, d.text);
      called = !parsed.calls.empty();
      d.text = std::move(parsed.content);
      if (called) {
        d.tool_calls = tool_calls_json(parsed.calls);
        d.null_content = d.text.empty() && settings_.tools->choice == ToolChoice::kAuto;
      }
    }
    d.finish_reason = finish_reason(c, called);
    d.stop_reason = c.stop_reason;
    if (settings_.want_prompt_logprobs) {
      prompt_logprobs[j] = c.prompt_logprobs;
      d.prompt_logprobs = &prompt_logprobs[j];
    }
    if (settings_.return_token_ids) {
      if (prompt < settings_.prompt_token_ids.size()) d.prompt_token_ids = &settings_.prompt_token_ids[prompt];
      d.token_ids = &c.token_ids;
    }
    all.push_back(std::move(d));
  }
  if (chat) {
    const Json prompt_json = settings_.want_prompt_logprobs && !prompt_logprobs.empty()
                                 ? prompt_logprobs_json(prompt_logprobs.front())
                                 : Json(nullptr);
    exchange_->send_json(200, chat_response(meta_, all, usage, prompt_json));
  } else {
    exchange_->send_json(200, completion_response(meta_, all, usage));
  }
}

}  // namespace optimate::server
