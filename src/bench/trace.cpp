#include "bench/trace.h"

#include <sstream>

#include <nlohmann/json.hpp>

#include "bench/distributions.h"
#include "core/error.h"
#include "core/text_file.h"

namespace optimate::bench {
namespace {

using nlohmann::json;

bool is_sharegpt(const json& record) { return record.is_object() && record.contains("conversations"); }

std::optional<TraceRecord> parse_sharegpt(const json& record, const std::string& where) {
  const json& turns = record.at("conversations");
  if (!turns.is_array()) fail(ErrorCode::kInvalidFile, "{}: \"conversations\" is not an array", where);
  for (size_t i = 0; i + 1 < turns.size(); ++i) {
    const json& ask = turns[i];
    const json& reply = turns[i + 1];
    if (!ask.is_object() || !reply.is_object()) continue;
    if (ask.value("from", "") != "human" || reply.value("from", "") != "gpt") continue;
    if (!ask.contains("value") || !ask["value"].is_string() || !reply.contains("value") ||
        !reply["value"].is_string())
      fail(ErrorCode::kInvalidFile, "{}: conversation turn {} has no string \"value\"", where, i);
    TraceRecord r;
    r.prompt_text = ask["value"].get<std::string>();
    r.completion_text = reply["value"].get<std::string>();
    if (r.prompt_text.empty()) return std::nullopt;
    return r;
  }
  return std::nullopt;
}

template <typename T>
std::optional<T> optional_number(const json& record, const char* key, const std::string& where) {
  if (!record.contains(key) || record[key].is_null()) return std::nullopt;
  const json& v = record[key];
  if (!v.is_number()) fail(ErrorCode::kInvalidFile, "{}: \"{}\" is not a number", where, key);
  return v.get<T>();
}

TraceRecord parse_plain(const json& record, const std::string& where) {
  if (!record.is_object()) fail(ErrorCode::kInvalidFile, "{}: record is not a JSON object", where);
  TraceRecord r;
  if (record.contains("prompt")) {
    const json& p = record["prompt"];
    if (p.is_string()) {
      r.prompt_text = p.get<std::string>();
    } else if (p.is_array()) {
      for (const json& id : p) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
          fail(ErrorCode::kInvalidFile, "{}: \"prompt\" array holds a non-token-id value {}", where,
               id.dump());
        r.prompt_token_ids.push_back(id.get<int32_t>());
      }
    } else {
      fail(ErrorCode::kInvalidFile, "{}: \"prompt\" must be a string or an array of token ids",
           where);
    }
  }
  r.prompt_len = optional_number<int64_t>(record, "prompt_len", where);
  r.max_tokens = optional_number<int64_t>(record, "max_tokens", where);
  r.priority = optional_number<int64_t>(record, "priority", where);
  r.arrival_s = optional_number<double>(record, "arrival_s", where);
  if (r.prompt_text.empty() && r.prompt_token_ids.empty() && !r.prompt_len)
    fail(ErrorCode::kInvalidFile, "{}: record has neither \"prompt\" nor \"prompt_len\"", where);
  if (r.prompt_len && (*r.prompt_len < 1 || *r.prompt_len > kMaxDrawnLength))
    fail(ErrorCode::kInvalidFile, "{}: \"prompt_len\" must be in [1, {}]", where, kMaxDrawnLength);
  if (r.max_tokens && (*r.max_tokens < 1 || *r.max_tokens > kMaxDrawnLength))
    fail(ErrorCode::kInvalidFile, "{}: \"max_tokens\" must be in [1, {}]", where, kMaxDrawnLength);
  if (r.arrival_s && *r.arrival_s < 0.0)
    fail(ErrorCode::kInvalidFile, "{}: \"arrival_s\" must be >= 0", where);
  return r;
}

void add_record(const json& record, TraceFormat format, const std::string& where,
                std::vector<TraceRecord>& out) {
  const bool sharegpt = format == TraceFormat::kShareGpt ||
                        (format == TraceFormat::kAuto && is_sharegpt(record));
  if (sharegpt) {
    if (!is_sharegpt(record))
      fail(ErrorCode::kInvalidFile, "{}: ShareGPT record has no \"conversations\"", where);
    if (auto r = parse_sharegpt(record, where)) out.push_back(std::move(*r));
  } else {
    out.push_back(parse_plain(record, where));
  }
}

}  // namespace

std::vector<TraceRecord> load_trace(const TraceSpec& spec, int64_t max_records) {
  const std::string text = read_regular_file(spec.path, "trace file " + spec.path, kMaxTextFileBytes);
  const size_t first = text.find_first_not_of(" \t\r\n");
  std::vector<TraceRecord> out;
  auto full = [&] { return max_records > 0 && static_cast<int64_t>(out.size()) >= max_records; };

  if (first != std::string::npos && text[first] == '[') {
    json all = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (all.is_discarded()) fail(ErrorCode::kInvalidFile, "{}: not valid JSON", spec.path);
    for (size_t i = 0; i < all.size() && !full(); ++i)
      add_record(all[i], spec.format, fmt::format("{} record {}", spec.path, i), out);
    return out;
  }
  std::istringstream lines(text);
  std::string line;
  for (int64_t line_no = 1; std::getline(lines, line) && !full(); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", spec.path, line_no);
    json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded()) fail(ErrorCode::kInvalidFile, "{}: not valid JSON", where);
    add_record(record, spec.format, where, out);
  }
  return out;
}

}  // namespace optimate::bench
