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
    for (const auto& t : e.top)
      top.push_back({{"token", t.token}, {"logprob", finite_logprob(t.logprob)}, {"bytes", utf8_bytes(t.token)}});
    content.push_back({{"token", e.chosen.token},
                       {"logprob", finite_logprob(e.chosen.logprob)},
                       {"bytes", utf8_bytes(e.chosen.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

// The legacy completions shape: parallel arrays, offsets into the choice's text. As in vLLM,
// each position's top_logprobs holds the chosen token too.
Json completion_logprobs(const ChoiceDelta& d) {
  if (!d.want_logprobs) return nullptr;
  Json offsets = Json::array(), lps = Json::array(), tokens = Json::array(), tops = Json::array();
  int64_t offset = d.text_offset;
  for (const auto& e : d.logprobs) {
    offsets.push_back(offset);
    offset += static_cast<int64_t>(e.chosen.token.size());
    tokens.push_back(e.chosen.token);
    if (!e.known) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    lps.push_back(finite_logprob(e.chosen.logprob));
    Json top = Json::object();
    top[e.chosen.token] = finite_logprob(e.chosen.logprob);
    for (const auto& t : e.top) top[t.token] = finite_logprob(t.logprob);
    tops.push_back(std::move(top));
  }
  return {{"text_offset", std::move(offsets)},
          {"token_logprobs", std::move(lps)},
          {"tokens", std::move(tokens)},
          {"top_logprobs", std::move(tops)}};
}

Json token_ids_json(const std::vector<int32_t>* ids) { return ids ? Json(*ids) : Json(nullptr); }

// vLLM's extra choice fields, when asked for.
void add_extras(Json& choice, const ChoiceDelta& d, bool completion) {
  if (completion && d.prompt_logprobs) choice["prompt_logprobs"] = prompt_logprobs_json(*d.prompt_logprobs);
  if (d.prompt_token_ids) choice["prompt_token_ids"] = token_ids_json(d.prompt_token_ids);
  if (d.token_ids) choice["token_ids"] = token_ids_json(d.token_ids);
}

Json finish(const ChoiceDelta& d) {
  return d.finish_reason ? Json(*d.finish_reason) : Json(nullptr);
}

}  // namespace

Json prompt_logprobs_json(const std::vector<LogprobEntry>& entries) {
  Json out = Json::array();
  for (const auto& e : entries) {
    if (!e.known) {
      out.push_back(nullptr);
      continue;
    }
    Json position = Json::object();
    auto put = [&](const TokenAlternative& t) {
      position[std::to_string(t.token_id)] = {
          {"logprob", finite_logprob(t.logprob)}, {"rank", t.rank}, {"decoded_token", t.token}};
    };
    put(e.chosen);
    for (const auto& t : e.top) put(t);
    out.push_back(std::move(position));
  }
  return out;
}

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
  if (!d.text.empty() || (first_for_choice && d.tool_calls.is_null())) delta["content"] = d.text;
  if (!d.tool_calls.is_null() && !d.tool_calls.empty()) delta["tool_calls"] = d.tool_calls;
  Json choice = {{"index", d.index},
                 {"delta", std::move(delta)},
                 {"logprobs", chat_logprobs(d)},
                 {"finish_reason", finish(d)}};
  if (d.finish_reason) choice["stop_reason"] = d.stop_reason;
  add_extras(choice, d, false);
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
  add_extras(choice, d, true);
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
                          const UsageCounts& usage, const Json& prompt_logprobs) {
  Json out = Json::array();
  for (const auto& c : choices) {
    Json message = {{"role", "assistant"}, {"content", c.null_content ? Json(nullptr) : Json(c.text)}};
    if (!c.tool_calls.is_null()) message["tool_calls"] = c.tool_calls;
    Json choice = {{"index", c.index},
                   {"message", std::move(message)},
                   {"logprobs", chat_logprobs(c)},
                   {"finish_reason", finish(c)},
                   {"stop_reason", c.stop_reason}};
    add_extras(choice, c, false);
    out.push_back(std::move(choice));
  }
  Json response = {{"id", meta.id},
                   {"object", "chat.completion"},
                   {"created", meta.created},
                   {"model", meta.model},
                   {"choices", std::move(out)},
                   {"usage", usage_json(usage)}};
  if (!prompt_logprobs.is_null()) response["prompt_logprobs"] = prompt_logprobs;
  return dump_json(response);
}

std::string completion_response(const ResponseMeta& meta, const std::vector<ChoiceDelta>& choices,
                                const UsageCounts& usage) {
  Json out = Json::array();
  for (const auto& c : choices) {
    Json choice = {{"index", c.index},
                   {"text", c.text},
                   {"logprobs", completion_logprobs(c)},
                   {"finish_reason", finish(c)},
                   {"stop_reason", c.stop_reason}};
    add_extras(choice, c, true);
    out.push_back(std::move(choice));
  }
  return dump_json({{"id", meta.id},
                    {"object", "text_completion"},
                    {"created", meta.created},
                    {"model", meta.model},
                    {"choices", std::move(out)},
                    {"usage", usage_json(usage)}});
}

}  // namespace optimate::server
