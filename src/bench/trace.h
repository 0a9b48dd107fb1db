// Request traces: ShareGPT conversation dumps and plain per-request JSONL records.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/workload.h"

namespace optimate::bench {

struct TraceRecord {
  std::string prompt_text;                // empty when the record gives token ids
  std::vector<int32_t> prompt_token_ids;  // from an id-array prompt
  std::optional<int64_t> prompt_len;      // "prompt_len": a synthetic prompt of that length
  std::optional<std::string> completion_text;  // ShareGPT's reply: its length is the output
  std::optional<int64_t> max_tokens;
  std::optional<int64_t> priority;
  std::optional<double> arrival_s;
};

// Reads `spec.path`: JSON Lines (one object per line), or a single JSON array of objects (the
// format ShareGPT dumps ship in). ShareGPT records keep their first human turn as the prompt
// and the reply that follows it as the completion; records without such a pair are skipped,
// as vllm bench does. Malformed records are Error(kInvalidFile) naming the path and line.
std::vector<TraceRecord> load_trace(const TraceSpec& spec, int64_t max_records);

}  // namespace optimate::bench
