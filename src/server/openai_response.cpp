#include "server/openai_response.h"

#include <algorithm>
#include <cmath>

namespace optimate::server {

namespace {

// JSON has no -Infinity; vLLM writes impossible tokens' logprobs as -9999.0.
double finite_logprob(double lp) { return std::isfinite(lp) ? lp : -9999.0; }

Json utf8_bytes(const std::string& s) {
  Json bytes = Json::array();
  for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
  return bytes;
}

Json chat_logprobs(const ChoiceDelta& d) {
  if (!d.want_logprobs) return nullptr;
  Json content = Json::array();
  for (const auto& e : d.logprobs) {
    Json top = Json::array();
    for (const auto& [token, lp] : e.top)
      top.push_back({{"token", token}, {"logprob", finite_logprob(lp)}, {"bytes", utf8_bytes(token)}});
    content.push_back({{"token", e.token},
                       {"logprob", finite_logprob(e.logprob)},
                       {"bytes", utf8_bytes(e.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

// The legacy completions shape: parallel arrays, offsets into the choice's text.
Json completion_logprobs(const ChoiceDelta& d) {
  if (!d.want_logprobs) return nullptr;
  Json offsets = Json::array(), lps = Json::array(), tokens = Json::array(), tops = Json::array();
  int64_t offset = d.text_offset;
  for (const auto& e : d.logprobs) {
    offsets.push_back(offset);
    offset += static_cast<int64_t>(e.token.size());
    lps.push_back(finite_logprob(e.logprob));
    tokens.push_back(e.token);
    Json top = Json::object();
    for (const auto& [token, lp] : e.top) top[token] = finite_logprob(lp);
    tops.push_back(std::move(top));
  }
  return {{"text_offset", std::move(offsets)},
          {"token_logprobs", std::move(lps)},
          {"tokens", std::move(tokens)},
          {"top_logprobs", std::move(tops)}};
}

Json finish(const ChoiceDelta& d) {
  return d.finish_reason ? Json(*d.finish_reason) : Json(nullptr);
}

}  // namespace

std::string dump_json(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string sse_event(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 8);
  out += "data: ";
  out += json;
  out += "\n\n";
  return out;
}

Json usage_json(const UsageCounts& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"completion_tokens", u.completion_tokens}};
}

std::string chat_chunk(const ResponseMeta& meta, const ChoiceDelta& d, bool first_for_choice,
                       const UsageCounts* usage) {
  Json delta = Json::object();
  if (first_for_choice) delta["role"] = "assistant";
  if (!d.text.empty() || first_for_choice) delta["content"] = d.text;
  Json choice = {{"index", d.index},
                 {"delta", std::move(delta)},
                 {"logprobs", chat_logprobs(d)},
                 {"finish_reason", finish(d)}};
  if (d.finish_reason) choice["stop_reason"] = d.stop_reason;
  Json chunk = {{"id", meta.id},
                {"object", "chat.completion.chunk"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", Json::array({std::move(choice)})}};
  if (usage) chunk["usage"] = usage_json(*usage);
  return dump_json(chunk);
}

std::string completion_chunk(const ResponseMeta& meta, const ChoiceDelta& d,
                             const UsageCounts* usage) {
  Json choice = {{"index", d.index},
                 {"text", d.text},
                 {"logprobs", completion_logprobs(d)},
                 {"finish_reason", finish(d)},
                 {"stop_reason", d.finish_reason ? d.stop_reason : Json(nullptr)}};
  Json chunk = {{"id", meta.id},
                {"object", "text_completion"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", Json::array({std::move(choice)})}};
  if (usage) chunk["usage"] = usage_json(*usage);
  return dump_json(chunk);
}

std::string usage_chunk(const ResponseMeta& meta, const UsageCounts& usage, bool chat) {
  return dump_json({{"id", meta.id},
                    {"object", chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", meta.created},
                    {"model", meta.model},
                    {"choices", Json::array()},
                    {"usage", usage_json(usage)}});
}

std::string chat_response(const ResponseMeta& meta, const std::vector<ChoiceDelta>& choices,
                          const UsageCounts& usage) {
  Json out = Json::array();
  for (const auto& c : choices)
    out.push_back({{"index", c.index},
                   {"message", {{"role", "assistant"}, {"content", c.text}}},
                   {"logprobs", chat_logprobs(c)},
                   {"finish_reason", finish(c)},
                   {"stop_reason", c.stop_reason}});
  return dump_json({{"id", meta.id},
                    {"object", "chat.completion"},
                    {"created", meta.created},
                    {"model", meta.model},
                    {"choices", std::move(out)},
                    {"usage", usage_json(usage)}});
}

std::string completion_response(const ResponseMeta& meta, const std::vector<ChoiceDelta>& choices,
                                const UsageCounts& usage) {
  Json out = Json::array();
  for (const auto& c : choices)
    out.push_back({{"index", c.index},
                   {"text", c.text},
                   {"logprobs", completion_logprobs(c)},
                   {"finish_reason", finish(c)},
                   {"stop_reason", c.stop_reason}});
  return dump_json({{"id", meta.id},
                    {"object", "text_completion"},
                    {"created", meta.created},
                    {"model", meta.model},
                    {"choices", std::move(out)},
                    {"usage", usage_json(usage)}});
}

}  // namespace optimate::server
