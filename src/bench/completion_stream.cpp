#include "bench/completion_stream.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace optimate::bench {
namespace {

using Json = nlohmann::json;

// An error body is read for its message only; a larger one is cut here.
constexpr size_t kMaxErrorBodyBytes = 64 << 10;
constexpr size_t kQuoteChars = 200;

std::string quote(std::string_view text) {
  std::string out(text.substr(0, kQuoteChars));
  if (text.size() > kQuoteChars) out += "...";
  return out;
}

// OpenAI's {"error": {"message"}}, vLLM's older {"message"}, FastAPI's {"detail"}, else the text.
std::string error_message(const std::string& body) {
  const Json j = Json::parse(body, nullptr, false);
  if (j.is_object()) {
    const Json* e = j.contains("error") ? &j["error"] : &j;
    if (e->is_string()) return e->get<std::string>();
    for (const char* key : {"message", "detail"})
      if (e->is_object() && e->contains(key) && (*e)[key].is_string()) return (*e)[key].get<std::string>();
  }
  return body.empty() ? "(empty body)" : quote(body);
}

int64_t count_field(const Json& usage, const char* key) {
  auto it = usage.find(key);
  return it != usage.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

}  // namespace

std::string completion_request_body(const BenchRequest& request, const std::string& model, bool ignore_eos) {
  Json body = {{"model", model},
               {"max_tokens", request.max_tokens},
               {"temperature", 0.0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (request.prompt_token_ids.empty()) body["prompt"] = request.prompt_text;
  else body["prompt"] = request.prompt_token_ids;
  if (ignore_eos) body["ignore_eos"] = true;
  if (request.priority != 0) body["priority"] = request.priority;
  return body.dump();
}

bool CompletionStreamReader::on_body(std::string_view bytes, double t_s) {
  if (status_ != 200) {
    error_body_.append(bytes.substr(0, kMaxErrorBodyBytes - std::min(kMaxErrorBodyBytes, error_body_.size())));
    return true;
  }
  if (last_event_s_ < 0) last_event_s_ = t_s;
  for (const std::string& data : parser_.feed(bytes)) {
    if (malformed_) break;
    on_event(data, t_s);
    last_event_s_ = t_s;
  }
  if (parser_.overflowed() && !malformed_)
    malformed(fmt::format("an event past {} MiB without an end", parser_.max_event_bytes() >> 20));
  if (!malformed_ && event_timeout_s_ > 0 && t_s - last_event_s_ > event_timeout_s_) {
    fail_record(fmt::format("no event from the server for {} s (only comments or partial lines)", event_timeout_s_));
    malformed_ = true;  // the connection is given up
  }
  return !malformed_;
}

void CompletionStreamReader::on_event(const std::string& data, double t_s) {
  if (done_) {
    malformed(fmt::format("an event after data: [DONE]: {}", quote(data)));
    return;
  }
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  const Json j = Json::parse(data, nullptr, false);
  if (!j.is_object()) {
    malformed(fmt::format("an event is not a JSON object: {}", quote(data)));
    return;
  }
  ++num_events_;
  if (j.contains("error")) {  // vLLM reports a failure inside an open stream this way
    fail_record("error in stream: " + error_message(data));
    return;
  }
  auto choices = j.find("choices");
  if (choices != j.end() && choices->is_array() && !choices->empty()) {
    auto text = (*choices)[0].find("text");
    if (text != (*choices)[0].end() && text->is_string() && !text->get_ref<const std::string&>().empty()) {
      if (record_.token_times_s.empty()) record_.first_token_s = t_s;
      record_.token_times_s.push_back(t_s);
    }
  }
  auto usage = j.find("usage");
  if (usage != j.end() && usage->is_object()) {
    usage_ = true;
    record_.prompt_tokens = count_field(*usage, "prompt_tokens");
    record_.output_tokens = count_field(*usage, "completion_tokens");
  }
}

void CompletionStreamReader::fail_record(std::string error) {
  if (record_.error.empty()) record_.error = std::move(error);
}

void CompletionStreamReader::malformed(const std::string& what) {
  fail_record("malformed stream: " + what);
  malformed_ = true;
}

void CompletionStreamReader::finish(double t_s, const std::string& transport_error) {
  record_.finish_s = t_s;
  if (status_ != 0 && status_ != 200) {
    fail_record(fmt::format("HTTP {}: {}", status_, error_message(error_body_)));
  } else if (!transport_error.empty()) {
    fail_record(fmt::format("{} (after {} stream events)", transport_error, num_events_));
  } else if (!done_) {
    fail_record(parser_.mid_event() ? "stream cut inside an event, before data: [DONE]"
                                    : "stream ended without data: [DONE]");
  } else if (record_.token_times_s.empty()) {
    fail_record("the stream carried no token");
  } else if (!usage_) {
    fail_record("no usage chunk: the server ignored stream_options.include_usage");
  }
  record_.success = record_.error.empty();
}

}  // namespace optimate::bench
