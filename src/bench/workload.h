// A benchmark workload: what to send (prompt tokens, output length, priority) and when.
//
// A WorkloadSpec is read from TOML (workload_toml.h); build_workload() turns it into a fixed
// list of requests with the spec's seed, so every configuration of a comparison, and every
// rerun, sees the identical requests at the identical offsets.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace optimate::bench {

enum class ArrivalKind {
  kOffline,     // every request at t = 0
  kConstant,    // one every 1/rate seconds
  kPoisson,     // exponential gaps at `rate`
  kGamma,       // gamma gaps with mean 1/rate; shape = burstiness (< 1 is burstier), as vllm bench
  kBurst,       // Poisson at on_rate for on_s, then off_rate for off_s, repeating
  kClosedLoop,  // `concurrency` requests in flight; a new one is sent when one finishes
  kTrace,       // arrival_s of each trace record
  kPhases,      // Poisson at each phase's rate for its duration, the phases repeating
};

// One stretch of a load whose rate changes over time (a step, a day's shape).
struct ArrivalPhase {
  double duration_s = 0.0;
  double rate_per_s = 0.0;
};

struct ArrivalSpec {
  ArrivalKind kind = ArrivalKind::kPoisson;
  double rate_per_s = 1.0;
  double burstiness = 1.0;
  double on_s = 0.0;
  double off_s = 0.0;
  double on_rate_per_s = 0.0;
  double off_rate_per_s = 0.0;
  int64_t concurrency = 1;
  std::vector<ArrivalPhase> phases;
};

enum class LengthKind {
  kFixed,      // always `value`
  kUniform,    // integer uniform in [min, max]
  kLognormal,  // exp(N(mu, sigma)) with mu chosen so the mean is `mean`, clamped to [min, max]
};

struct LengthSpec {
  LengthKind kind = LengthKind::kFixed;
  int64_t value = 128;
  int64_t min = 1;
  int64_t max = 1 << 20;
  double mean = 128.0;
  double sigma = 0.5;
};

struct PriorityClass {
  std::string name;
  int64_t priority = 0;
  double weight = 1.0;  // share of requests; weights need not sum to 1
};

// Requests of a group share their first `length` tokens, so prefix caching can reuse them.
// The prompt length distribution describes the part after the shared prefix.
struct PrefixSpec {
  int64_t num_groups = 0;
  int64_t length = 0;
  double fraction = 1.0;  // share of requests that carry a group prefix
};

enum class TraceFormat {
  kAuto,      // ShareGPT when records hold "conversations", else plain
  kShareGpt,  // [{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}]
  kPlain,     // {"prompt": text | [ids], "prompt_len", "max_tokens", "priority", "arrival_s"}
};

struct TraceSpec {
  std::string path;  // JSONL, or one JSON array (the ShareGPT dump format)
  TraceFormat format = TraceFormat::kAuto;
};

// Multi-turn chat: each request the arrival process draws opens a conversation of `turns`
// turns. A turn is sent think time after the previous one finished, and its prompt resends the
// history (every earlier prompt and answer) followed by a new user message of the prompt
// length distribution. The answers resent are the workload's own tokens of the turn's output
// length, not the model's (as benchmarks that replay a chat dataset resend its answers), so a
// returning turn finds at most its previous prompt in the prefix cache.
struct ConversationSpec {
  LengthSpec turns{.kind = LengthKind::kFixed, .value = 4};
  double think_s = 0.0;       // mean seconds between an answer and the next turn
  bool think_fixed = false;   // false: exponential with that mean
};

struct WorkloadSpec {
  std::string name = "workload";
  uint64_t seed = 0;
  int64_t num_requests = 100;  // for a trace: the first num_requests records (0 = all)
  ArrivalSpec arrival;
  LengthSpec prompt;
  LengthSpec output;
  std::vector<PriorityClass> priorities;  // empty: every request has priority 0
  PrefixSpec prefix;
  std::optional<TraceSpec> trace;
  // Set: num_requests conversations of several turns each (no trace).
  std::optional<ConversationSpec> conversation;
  // Synthetic prompt tokens are drawn from [token_id_min, token_id_max], away from the special
  // tokens at both ends of common vocabularies.
  int64_t token_id_min = 1000;
  int64_t token_id_max = 30000;
  // Generate exactly max_tokens (vllm bench's default): the measured output length is then the
  // workload's, not the model's.
  bool ignore_eos = true;
};

struct BenchRequest {
  std::string id;
  double arrival_s = 0.0;  // offset from the start of the run; 0 for closed loop and offline
  std::vector<int32_t> prompt_token_ids;  // exact prompt; empty when only text is known
  std::string prompt_text;                // from a trace; sent as text when ids are absent
  int64_t prompt_len = 0;                 // tokens; 0 when only text is known
  int64_t max_tokens = 0;
  int64_t priority = 0;
  std::string priority_class;             // name from the mix, or "p<N>"
  int64_t prefix_group = -1;
  // Multi-turn: the conversation and turn (0 first); a later turn is sent think_s after the
  // request at index `after` (of Workload::requests) finished, not at arrival_s.
  int64_t conversation = -1;
  int64_t turn = 0;
  int64_t after = -1;
  double think_s = 0.0;
};

struct Workload {
  WorkloadSpec spec;
  // Sorted by arrival_s; the later turns of conversations follow the rest, each after the
  // turn it follows.
  std::vector<BenchRequest> requests;
};

// The request each request is followed by (index into requests, -1: none).
std::vector<int64_t> followers(const Workload& workload);
// How many requests are sent at their arrival time: the first ones; the rest follow another.
size_t num_independent(const Workload& workload);

// Turns text into token ids (the model's tokenizer); lets a trace of texts have exact lengths.
using TextEncoder = std::function<std::vector<int32_t>(const std::string&)>;

// Validates the spec (Error(kInvalidArgument) naming the field) and draws the requests.
Workload build_workload(const WorkloadSpec& spec, const TextEncoder& encoder = {});

const char* arrival_kind_name(ArrivalKind kind);

}  // namespace optimate::bench
