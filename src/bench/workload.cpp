#include "bench/workload.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "bench/distributions.h"
#include "bench/trace.h"
#include "core/error.h"

namespace optimate::bench {
namespace {

// A workload is built whole before it runs: its requests and their prompts' tokens are bounded
// so that building one never takes more memory than a machine has (2^28 tokens are 1 GiB, a
// hundred times the project's largest workloads).
constexpr int64_t kMaxRequests = 10'000'000;
constexpr int64_t kMaxPromptTokens = int64_t{1} << 28;

// Adds `n` tokens to the prompts built so far; Error past kMaxPromptTokens.
void count_prompt_tokens(int64_t& total, int64_t n, const WorkloadSpec& spec) {
  total += n;
  if (total > kMaxPromptTokens)
    fail(ErrorCode::kInvalidArgument, "workload {}: its prompts pass {} tokens; use fewer or shorter requests, turns "
         "or shared prefixes", spec.name, kMaxPromptTokens);
}

// One stream per random quantity (see derive_seed).
enum Stream : uint64_t { kArrivals, kPromptLens, kOutputLens, kPriorities, kTokens, kPrefixes, kTurns };

void validate(const WorkloadSpec& spec) {
  if (spec.num_requests < 0 || (!spec.trace && spec.num_requests == 0))
    fail(ErrorCode::kInvalidArgument, "workload.num_requests must be >= 1, got {}",
         spec.num_requests);
  if (spec.num_requests > kMaxRequests)
    fail(ErrorCode::kInvalidArgument, "workload.num_requests must be at most {}, got {}", kMaxRequests,
         spec.num_requests);
  validate_arrival_spec(spec.arrival);
  validate_length_spec(spec.prompt, "workload.prompt");
  validate_length_spec(spec.output, "workload.output");
  if (spec.arrival.kind == ArrivalKind::kTrace && !spec.trace)
    fail(ErrorCode::kInvalidArgument, "workload.arrival.kind = \"trace\" needs [workload.trace]");
  if (spec.token_id_min < 0 || spec.token_id_max < spec.token_id_min)
    fail(ErrorCode::kInvalidArgument, "workload token_id_min/max: need 0 <= {} <= {}",
         spec.token_id_min, spec.token_id_max);
  double total_weight = 0.0;
  std::set<std::string> names;
  for (const auto& c : spec.priorities) {
    if (!(c.weight >= 0.0) || !std::isfinite(c.weight))
      fail(ErrorCode::kInvalidArgument, "workload.priorities \"{}\": weight must be finite and >= 0, got {}", c.name,
           c.weight);
    if (!names.insert(c.name).second)
      fail(ErrorCode::kInvalidArgument, "workload.priorities: two classes are named \"{}\"", c.name);
    total_weight += c.weight;
  }
  if (!spec.priorities.empty() && !(total_weight > 0.0))
    fail(ErrorCode::kInvalidArgument, "workload.priorities: weights sum to 0");
  const auto& p = spec.prefix;
  if (p.num_groups < 0 || p.length < 0 || p.fraction < 0.0 || p.fraction > 1.0)
    fail(ErrorCode::kInvalidArgument,
         "workload.prefix: need groups >= 0, length >= 0, 0 <= fraction <= 1");
  if (p.num_groups > 0 && p.length == 0)
    fail(ErrorCode::kInvalidArgument, "workload.prefix.length must be >= 1 with groups > 0");
  if (p.num_groups > kMaxRequests)
    fail(ErrorCode::kInvalidArgument, "workload.prefix.groups must be at most {}, got {}", kMaxRequests, p.num_groups);
  if (p.length > kMaxDrawnLength)
    fail(ErrorCode::kInvalidArgument, "workload.prefix.length must be at most {} tokens, got {}", kMaxDrawnLength,
         p.length);
  if (spec.conversation) {
    if (spec.trace)
      fail(ErrorCode::kInvalidArgument, "workload.conversation and workload.trace do not go together");
    validate_length_spec(spec.conversation->turns, "workload.conversation.turns");
    if (!(spec.conversation->think_s >= 0.0))
      fail(ErrorCode::kInvalidArgument, "workload.conversation.think_s must be >= 0");
  }
}

std::vector<int32_t> random_tokens(int64_t n, const WorkloadSpec& spec, Random& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(rng.uniform_int(spec.token_id_min, spec.token_id_max));
  return ids;
}

const PriorityClass* draw_class(const std::vector<PriorityClass>& classes, Random& rng) {
  if (classes.empty()) return nullptr;
  double total = 0.0;
  for (const auto& c : classes) total += c.weight;
  double x = rng.uniform() * total;
  for (const auto& c : classes) {
    if (x < c.weight) return &c;
    x -= c.weight;
  }
  return &classes.back();
}

std::string class_name_for(int64_t priority, const std::vector<PriorityClass>& classes) {
  for (const auto& c : classes)
    if (c.priority == priority) return c.name;
  return fmt::format("p{}", priority);
}

}  // namespace

const char* arrival_kind_name(ArrivalKind kind) {
  switch (kind) {
    case ArrivalKind::kOffline: return "offline";
    case ArrivalKind::kConstant: return "constant";
    case ArrivalKind::kPoisson: return "poisson";
    case ArrivalKind::kGamma: return "gamma";
    case ArrivalKind::kBurst: return "burst";
    case ArrivalKind::kClosedLoop: return "closed";
    case ArrivalKind::kTrace: return "trace";
    case ArrivalKind::kPhases: return "phases";
  }
  return "?";
}

std::vector<int64_t> followers(const Workload& workload) {
  std::vector<int64_t> out(workload.requests.size(), -1);
  for (size_t i = 0; i < workload.requests.size(); ++i) {
    const int64_t after = workload.requests[i].after;
    if (after >= 0) out.at(static_cast<size_t>(after)) = static_cast<int64_t>(i);
  }
  return out;
}

size_t num_independent(const Workload& workload) {
  const auto& r = workload.requests;
  return static_cast<size_t>(std::find_if(r.begin(), r.end(), [](const BenchRequest& x) { return x.after >= 0; }) -
                             r.begin());
}

namespace {

// One seeded stream per random quantity.
struct Streams {
  Random arrival, prompt, output, priority, token, prefix, turn;
  explicit Streams(uint64_t seed)
      : arrival(derive_seed(seed, kArrivals)), prompt(derive_seed(seed, kPromptLens)),
        output(derive_seed(seed, kOutputLens)), priority(derive_seed(seed, kPriorities)),
        token(derive_seed(seed, kTokens)), prefix(derive_seed(seed, kPrefixes)), turn(derive_seed(seed, kTurns)) {}
};

// Conversations: a first turn per arrival, then every later turn after the one before it.
void add_conversations(const WorkloadSpec& spec, const std::vector<std::vector<int32_t>>& prefixes,
                       Streams& rng, Workload& w, int64_t& prompt_tokens) {
  const ConversationSpec& cs = *spec.conversation;
  const std::vector<double> arrivals = draw_arrivals(spec.arrival, spec.num_requests, rng.arrival);
  std::vector<BenchRequest> first, later;
  std::vector<std::vector<BenchRequest>> turns(static_cast<size_t>(spec.num_requests));
  for (int64_t c = 0; c < spec.num_requests; ++c) {
    const int64_t num_turns = draw_length(cs.turns, rng.turn);
    const PriorityClass* cls = draw_class(spec.priorities, rng.priority);
    const bool in_group = !prefixes.empty() && rng.prefix.uniform() < spec.prefix.fraction;
    const int64_t group = in_group ? rng.prefix.uniform_int(0, spec.prefix.num_groups - 1) : -1;
    std::vector<int32_t> history = group >= 0 ? prefixes[static_cast<size_t>(group)] : std::vector<int32_t>{};
    for (int64_t t = 0; t < num_turns; ++t) {
      BenchRequest r;
      r.id = fmt::format("{}-{}.{}", spec.name, c, t);
      r.conversation = c;
      r.turn = t;
      r.arrival_s = arrivals[static_cast<size_t>(c)];
      r.think_s = t == 0 ? 0.0 : cs.think_fixed ? cs.think_s : (cs.think_s > 0.0 ? rng.turn.exponential(1.0 / cs.think_s) : 0.0);
      r.priority = cls ? cls->priority : 0;
      r.priority_class = cls ? cls->name : "p0";
      r.prefix_group = group;
      const std::vector<int32_t> user = random_tokens(draw_length(spec.prompt, rng.prompt), spec, rng.token);
      history.insert(history.end(), user.begin(), user.end());
      r.prompt_token_ids = history;
      r.prompt_len = static_cast<int64_t>(history.size());
      count_prompt_tokens(prompt_tokens, r.prompt_len, spec);  // each turn holds the whole history
      r.max_tokens = draw_length(spec.output, rng.output);
      const std::vector<int32_t> answer = random_tokens(r.max_tokens, spec, rng.token);
      history.insert(history.end(), answer.begin(), answer.end());
      turns[static_cast<size_t>(c)].push_back(std::move(r));
    }
  }
  // First turns in arrival order, then the later ones; `after` names the previous turn's index.
  std::vector<int64_t> order(static_cast<size_t>(spec.num_requests));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return arrivals[static_cast<size_t>(a)] < arrivals[static_cast<size_t>(b)]; });
  std::vector<int64_t> index_of_first(static_cast<size_t>(spec.num_requests), -1);
  for (int64_t c : order) {
    if (turns[static_cast<size_t>(c)].empty()) continue;
    index_of_first[static_cast<size_t>(c)] = static_cast<int64_t>(w.requests.size());
    w.requests.push_back(turns[static_cast<size_t>(c)][0]);
  }
  for (int64_t c : order) {
    int64_t previous = index_of_first[static_cast<size_t>(c)];
    for (size_t t = 1; t < turns[static_cast<size_t>(c)].size(); ++t) {
      BenchRequest r = turns[static_cast<size_t>(c)][t];
      r.after = previous;
      previous = static_cast<int64_t>(w.requests.size());
      w.requests.push_back(std::move(r));
    }
  }
}

// The clocks that run a workload count nanoseconds in 64 bits: arrivals past kMaxArrivalS (a
// rate far too low, a trace's timestamps in the wrong unit) are refused, not wrapped.
constexpr double kMaxArrivalS = 1e9;

const Workload& check_arrivals(const Workload& w) {
  for (const BenchRequest& r : w.requests)
    if (!(r.arrival_s >= 0.0 && r.arrival_s <= kMaxArrivalS))
      fail(ErrorCode::kInvalidArgument,
           "request {} arrives at {:g} s, past the {:g} s a run can span (is the arrival rate that low?)", r.id,
           r.arrival_s, kMaxArrivalS);
  return w;
}

}  // namespace

Workload build_workload(const WorkloadSpec& spec, const TextEncoder& encoder) {
  validate(spec);
  std::vector<TraceRecord> trace;
  if (spec.trace) {
    trace = load_trace(*spec.trace, spec.num_requests);
    if (trace.empty()) fail(ErrorCode::kInvalidFile, "trace {} holds no usable record", spec.trace->path);
  }
  const int64_t n = spec.trace ? static_cast<int64_t>(trace.size()) : spec.num_requests;

  Streams rng(spec.seed);
  Random& arrival_rng = rng.arrival;
  Random& prompt_rng = rng.prompt;
  Random& output_rng = rng.output;
  Random& priority_rng = rng.priority;
  Random& token_rng = rng.token;
  Random& prefix_rng = rng.prefix;

  int64_t prompt_tokens = 0;
  std::vector<std::vector<int32_t>> prefixes;
  for (int64_t g = 0; g < spec.prefix.num_groups; ++g) {
    count_prompt_tokens(prompt_tokens, spec.prefix.length, spec);
    prefixes.push_back(random_tokens(spec.prefix.length, spec, prefix_rng));
  }

  Workload w;
  w.spec = spec;
  if (spec.conversation) {
    add_conversations(spec, prefixes, rng, w, prompt_tokens);
    return check_arrivals(w);
  }
  const std::vector<double> arrivals = draw_arrivals(spec.arrival, n, arrival_rng);
  w.requests.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    BenchRequest& r = w.requests[static_cast<size_t>(i)];
    r.id = fmt::format("{}-{}", spec.name, i);
    r.arrival_s = arrivals[static_cast<size_t>(i)];
    // Every draw happens for every request, used or not, so one record's trace fields never
    // shift the random values of the next.
    const int64_t drawn_prompt = draw_length(spec.prompt, prompt_rng);
    const int64_t drawn_output = draw_length(spec.output, output_rng);
    const PriorityClass* cls = draw_class(spec.priorities, priority_rng);
    const bool in_group = !prefixes.empty() && prefix_rng.uniform() < spec.prefix.fraction;
    const int64_t group = in_group ? prefix_rng.uniform_int(0, spec.prefix.num_groups - 1) : -1;

    r.max_tokens = drawn_output;
    r.priority = cls ? cls->priority : 0;
    r.priority_class = cls ? cls->name : "p0";
    std::vector<int32_t> body;
    if (spec.trace) {
      const TraceRecord& t = trace[static_cast<size_t>(i)];
      if (spec.arrival.kind == ArrivalKind::kTrace) {
        if (!t.arrival_s)
          fail(ErrorCode::kInvalidFile, "trace {} record {} has no arrival_s (arrival kind is trace)",
               spec.trace->path, i);
        r.arrival_s = *t.arrival_s;
      }
      if (t.priority) {
        r.priority = *t.priority;
        r.priority_class = class_name_for(r.priority, spec.priorities);
      }
      if (t.max_tokens) {
        r.max_tokens = *t.max_tokens;
      } else if (t.completion_text && encoder) {
        r.max_tokens = std::max<int64_t>(1, static_cast<int64_t>(encoder(*t.completion_text).size()));
      }
      if (!t.prompt_token_ids.empty()) {
        body = t.prompt_token_ids;
      } else if (!t.prompt_text.empty()) {
        if (encoder) body = encoder(t.prompt_text);
        else r.prompt_text = t.prompt_text;
      } else {
        body = random_tokens(*t.prompt_len, spec, token_rng);
      }
    } else {
      body = random_tokens(drawn_prompt, spec, token_rng);
    }
    if (group >= 0 && r.prompt_text.empty()) {
      r.prefix_group = group;
      r.prompt_token_ids = prefixes[static_cast<size_t>(group)];
    }
    r.prompt_token_ids.insert(r.prompt_token_ids.end(), body.begin(), body.end());
    r.prompt_len = static_cast<int64_t>(r.prompt_token_ids.size());
    count_prompt_tokens(prompt_tokens, r.prompt_len, spec);
  }
  std::stable_sort(w.requests.begin(), w.requests.end(),
                   [](const BenchRequest& a, const BenchRequest& b) { return a.arrival_s < b.arrival_s; });
  return check_arrivals(w);
}

}  // namespace optimate::bench
