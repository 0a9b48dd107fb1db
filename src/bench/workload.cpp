#include "bench/workload.h"

#include <algorithm>
#include <numeric>

#include "bench/distributions.h"
#include "bench/trace.h"
#include "core/error.h"

namespace optimate::bench {
namespace {

// One stream per random quantity (see derive_seed).
enum Stream : uint64_t { kArrivals, kPromptLens, kOutputLens, kPriorities, kTokens, kPrefixes };

void validate(const WorkloadSpec& spec) {
  if (spec.num_requests < 0 || (!spec.trace && spec.num_requests == 0))
    fail(ErrorCode::kInvalidArgument, "workload.num_requests must be >= 1, got {}",
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
  for (const auto& c : spec.priorities) {
    if (!(c.weight >= 0.0))
      fail(ErrorCode::kInvalidArgument, "workload.priorities \"{}\": weight must be >= 0", c.name);
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

Workload build_workload(const WorkloadSpec& spec, const TextEncoder& encoder) {
  validate(spec);
  std::vector<TraceRecord> trace;
  if (spec.trace) {
    trace = load_trace(*spec.trace, spec.num_requests);
    if (trace.empty()) fail(ErrorCode::kInvalidFile, "trace {} holds no usable record", spec.trace->path);
  }
  const int64_t n = spec.trace ? static_cast<int64_t>(trace.size()) : spec.num_requests;

  Random arrival_rng(derive_seed(spec.seed, kArrivals));
  Random prompt_rng(derive_seed(spec.seed, kPromptLens));
  Random output_rng(derive_seed(spec.seed, kOutputLens));
  Random priority_rng(derive_seed(spec.seed, kPriorities));
  Random token_rng(derive_seed(spec.seed, kTokens));
  Random prefix_rng(derive_seed(spec.seed, kPrefixes));

  std::vector<std::vector<int32_t>> prefixes;
  for (int64_t g = 0; g < spec.prefix.num_groups; ++g)
    prefixes.push_back(random_tokens(spec.prefix.length, spec, prefix_rng));

  const std::vector<double> arrivals = draw_arrivals(spec.arrival, n, arrival_rng);
  Workload w;
  w.spec = spec;
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
  }
  std::stable_sort(w.requests.begin(), w.requests.end(),
                   [](const BenchRequest& a, const BenchRequest& b) { return a.arrival_s < b.arrival_s; });
  return w;
}

}  // namespace optimate::bench
