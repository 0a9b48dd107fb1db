// Workload generators draw the distributions their specs state (checked on large fixed-seed
// samples against the distributions' known moments) and are reproducible.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "bench/distributions.h"
#include "bench/workload.h"
#include "bench/workload_toml.h"
#include "core/error.h"

namespace optimate::bench {
namespace {

std::vector<double> gaps(const std::vector<double>& t) {
  std::vector<double> g;
  for (size_t i = 1; i < t.size(); ++i) g.push_back(t[i] - t[i - 1]);
  return g;
}

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }

double variance(const std::vector<double>& v) {
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / (v.size() - 1);
}

TEST(Arrivals, PoissonHasExponentialGapsAtTheRate) {
  Random rng(7);
  ArrivalSpec spec{.kind = ArrivalKind::kPoisson, .rate_per_s = 20.0};
  const auto g = gaps(draw_arrivals(spec, 40001, rng));
  EXPECT_NEAR(mean(g), 1.0 / 20.0, 0.02 / 20.0);
  // Exponential: coefficient of variation 1, and P(gap > mean) = e^-1.
  EXPECT_NEAR(std::sqrt(variance(g)) / mean(g), 1.0, 0.03);
  const double above = std::count_if(g.begin(), g.end(), [](double x) { return x > 0.05; });
  EXPECT_NEAR(above / g.size(), std::exp(-1.0), 0.01);
}

TEST(Arrivals, GammaKeepsTheRateAndRaisesVarianceByOneOverBurstiness) {
  for (double shape : {0.25, 1.0, 4.0}) {
    Random rng(11);
    ArrivalSpec spec{.kind = ArrivalKind::kGamma, .rate_per_s = 10.0, .burstiness = shape};
    const auto g = gaps(draw_arrivals(spec, 60001, rng));
    EXPECT_NEAR(mean(g), 0.1, 0.004) << "shape " << shape;
    // Gamma(k, theta): CV^2 = 1 / k.
    EXPECT_NEAR(variance(g) / (mean(g) * mean(g)), 1.0 / shape, 0.06 / shape) << "shape " << shape;
  }
}

TEST(Arrivals, ConstantIsEvenlySpacedAndStartsAtZero) {
  Random rng(1);
  const auto t = draw_arrivals({.kind = ArrivalKind::kConstant, .rate_per_s = 4.0}, 5, rng);
  EXPECT_EQ(t, (std::vector<double>{0.0, 0.25, 0.5, 0.75, 1.0}));
}

TEST(Arrivals, BurstSendsAtTheOnRateInsideBurstsAndTheOffRateBetween) {
  Random rng(3);
  ArrivalSpec spec{.kind = ArrivalKind::kBurst, .on_s = 2.0, .off_s = 8.0,
                   .on_rate_per_s = 50.0, .off_rate_per_s = 5.0};
  const auto t = draw_arrivals(spec, 30000, rng);
  double on_count = 0, off_count = 0;
  for (double x : t) (std::fmod(x, 10.0) < 2.0 ? on_count : off_count) += 1;
  const double periods = t.back() / 10.0;
  EXPECT_NEAR(on_count / (2.0 * periods), 50.0, 1.5);
  EXPECT_NEAR(off_count / (8.0 * periods), 5.0, 0.3);
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
}

TEST(Arrivals, OfflineAndClosedLoopSendEverythingAtZero) {
  Random rng(1);
  for (auto kind : {ArrivalKind::kOffline, ArrivalKind::kClosedLoop})
    for (double x : draw_arrivals({.kind = kind}, 10, rng)) EXPECT_EQ(x, 0.0);
}

TEST(Lengths, UniformCoversItsRangeWithTheRightMean) {
  Random rng(5);
  LengthSpec spec{.kind = LengthKind::kUniform, .min = 10, .max = 20};
  std::map<int64_t, int> counts;
  for (int i = 0; i < 22000; ++i) counts[draw_length(spec, rng)]++;
  ASSERT_EQ(counts.size(), 11u);
  EXPECT_EQ(counts.begin()->first, 10);
  EXPECT_EQ(counts.rbegin()->first, 20);
  for (auto [value, n] : counts) EXPECT_NEAR(n, 2000, 200) << value;
}

TEST(Lengths, LognormalHasTheStatedMeanAndLogSpread) {
  Random rng(9);
  LengthSpec spec{.kind = LengthKind::kLognormal, .min = 1, .max = 1 << 30, .mean = 400.0, .sigma = 0.6};
  std::vector<double> logs, values;
  for (int i = 0; i < 50000; ++i) {
    const double v = static_cast<double>(draw_length(spec, rng));
    values.push_back(v);
    logs.push_back(std::log(v));
  }
  EXPECT_NEAR(mean(values), 400.0, 6.0);
  EXPECT_NEAR(std::sqrt(variance(logs)), 0.6, 0.01);
}

TEST(Lengths, LognormalIsClampedToMinAndMax) {
  Random rng(9);
  LengthSpec spec{.kind = LengthKind::kLognormal, .min = 300, .max = 500, .mean = 400.0, .sigma = 1.0};
  for (int i = 0; i < 2000; ++i) {
    const int64_t v = draw_length(spec, rng);
    EXPECT_GE(v, 300);
    EXPECT_LE(v, 500);
  }
}

WorkloadSpec mixed_spec() {
  WorkloadSpec spec;
  spec.name = "mixed";
  spec.seed = 42;
  spec.num_requests = 5000;
  spec.arrival = {.kind = ArrivalKind::kPoisson, .rate_per_s = 10.0};
  spec.prompt = {.kind = LengthKind::kUniform, .min = 5, .max = 50};
  spec.output = {.kind = LengthKind::kFixed, .value = 7};
  spec.priorities = {{"high", 3, 0.1}, {"medium", 2, 0.3}, {"low", 1, 0.6}};
  return spec;
}

TEST(Workload, PromptLengthsAreExactAndTokensStayInRange) {
  const Workload w = build_workload(mixed_spec());
  ASSERT_EQ(w.requests.size(), 5000u);
  for (const auto& r : w.requests) {
    EXPECT_EQ(static_cast<int64_t>(r.prompt_token_ids.size()), r.prompt_len);
    EXPECT_GE(r.prompt_len, 5);
    EXPECT_LE(r.prompt_len, 50);
    EXPECT_EQ(r.max_tokens, 7);
    for (int32_t id : r.prompt_token_ids) {
      EXPECT_GE(id, 1000);
      EXPECT_LE(id, 30000);
    }
  }
}

TEST(Workload, PriorityMixMatchesItsWeights) {
  const Workload w = build_workload(mixed_spec());
  std::map<std::string, double> share;
  for (const auto& r : w.requests) share[r.priority_class] += 1.0 / w.requests.size();
  EXPECT_NEAR(share["high"], 0.1, 0.015);
  EXPECT_NEAR(share["medium"], 0.3, 0.02);
  EXPECT_NEAR(share["low"], 0.6, 0.02);
  for (const auto& r : w.requests)
    EXPECT_EQ(r.priority, r.priority_class == "high" ? 3 : r.priority_class == "medium" ? 2 : 1);
}

TEST(Workload, SameSeedGivesTheSameRequestsAndAnotherSeedDoesNot) {
  const Workload a = build_workload(mixed_spec());
  const Workload b = build_workload(mixed_spec());
  WorkloadSpec other = mixed_spec();
  other.seed = 43;
  const Workload c = build_workload(other);
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].arrival_s, b.requests[i].arrival_s);
    EXPECT_EQ(a.requests[i].prompt_token_ids, b.requests[i].prompt_token_ids);
    EXPECT_EQ(a.requests[i].priority, b.requests[i].priority);
  }
  EXPECT_NE(a.requests[1].arrival_s, c.requests[1].arrival_s);
}

TEST(Workload, ChangingLengthsLeavesArrivalTimesAlone) {
  WorkloadSpec longer = mixed_spec();
  longer.prompt = {.kind = LengthKind::kFixed, .value = 900};
  const Workload a = build_workload(mixed_spec());
  const Workload b = build_workload(longer);
  for (size_t i = 0; i < a.requests.size(); ++i) EXPECT_EQ(a.requests[i].arrival_s, b.requests[i].arrival_s);
}

TEST(Workload, PrefixGroupsShareTheirLeadingTokens) {
  WorkloadSpec spec = mixed_spec();
  spec.num_requests = 400;
  spec.prefix = {.num_groups = 3, .length = 16, .fraction = 0.5};
  const Workload w = build_workload(spec);
  std::map<int64_t, std::vector<int32_t>> first;
  int grouped = 0;
  for (const auto& r : w.requests) {
    if (r.prefix_group < 0) continue;
    ++grouped;
    EXPECT_GE(r.prompt_len, 16 + 5);
    std::vector<int32_t> head(r.prompt_token_ids.begin(), r.prompt_token_ids.begin() + 16);
    auto [it, inserted] = first.emplace(r.prefix_group, head);
    EXPECT_EQ(it->second, head);
  }
  EXPECT_EQ(first.size(), 3u);
  EXPECT_NEAR(grouped, 200, 30);
  EXPECT_NE(first[0], first[1]);
}

class TraceFiles : public ::testing::Test {
 protected:
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "optimate_bench_trace_test";
  void SetUp() override { std::filesystem::create_directories(dir); }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  }
};

TEST_F(TraceFiles, ShareGptDumpTakesFirstHumanTurnAndReplyLength) {
  const std::string path = write("sg.json", R"([
    {"id": "a", "conversations": [{"from": "human", "value": "one two three"},
                                  {"from": "gpt", "value": "four five"}]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "orphan reply"}]},
    {"id": "c", "conversations": [{"from": "system", "value": "x"}, {"from": "human", "value": "six"},
                                  {"from": "gpt", "value": "seven eight nine ten"}]}])");
  WorkloadSpec spec = mixed_spec();
  spec.trace = TraceSpec{path, TraceFormat::kAuto};
  spec.num_requests = 0;
  spec.arrival = {.kind = ArrivalKind::kOffline};
  // A whitespace "tokenizer" stands in for the model's: lengths follow whatever it returns.
  TextEncoder words = [](const std::string& s) {
    std::vector<int32_t> ids;
    for (char c : s) if (c == ' ') ids.push_back(1);
    ids.push_back(2);
    return ids;
  };
  const Workload w = build_workload(spec, words);
  ASSERT_EQ(w.requests.size(), 2u);  // the record without a human/gpt pair is skipped
  EXPECT_EQ(w.requests[0].prompt_len, 3);
  EXPECT_EQ(w.requests[0].max_tokens, 2);
  EXPECT_EQ(w.requests[1].prompt_len, 1);
  EXPECT_EQ(w.requests[1].max_tokens, 4);
}

TEST_F(TraceFiles, PlainJsonlKeepsArrivalsPrioritiesAndTokenPrompts) {
  const std::string path = write("plain.jsonl",
      "{\"prompt\": [5, 6, 7], \"max_tokens\": 9, \"priority\": 3, \"arrival_s\": 0.5}\n"
      "\n"
      "{\"prompt_len\": 12, \"max_tokens\": 4, \"arrival_s\": 0.25}\n");
  WorkloadSpec spec = mixed_spec();
  spec.trace = TraceSpec{path, TraceFormat::kPlain};
  spec.num_requests = 0;
  spec.arrival = {.kind = ArrivalKind::kTrace};
  const Workload w = build_workload(spec);
  ASSERT_EQ(w.requests.size(), 2u);
  EXPECT_EQ(w.requests[0].arrival_s, 0.25);  // sorted by arrival
  EXPECT_EQ(w.requests[0].prompt_len, 12);
  EXPECT_EQ(w.requests[1].prompt_token_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(w.requests[1].priority, 3);
  EXPECT_EQ(w.requests[1].priority_class, "high");
  EXPECT_EQ(w.requests[1].max_tokens, 9);
}

TEST_F(TraceFiles, MalformedLineNamesFileAndLine) {
  const std::string path = write("bad.jsonl", "{\"prompt\": \"ok\"}\n{\"prompt\": 5}\n");
  WorkloadSpec spec = mixed_spec();
  spec.trace = TraceSpec{path, TraceFormat::kPlain};
  try {
    build_workload(spec);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
}

TEST(WorkloadToml, ReadsEverySectionAndAppliesOverrides) {
  const WorkloadSpec spec = parse_workload_spec(R"(
[workload]
name = "burst-mix"
seed = 3
num_requests = 200
token_id_range = [100, 200]
[workload.arrival]
kind = "burst"
on_s = 1.0
off_s = 4.0
on_rate = 30
off_rate = 2
[workload.prompt]
kind = "lognormal"
mean = 300
sigma = 0.4
min = 8
max = 2048
[workload.output]
kind = "uniform"
min = 16
max = 64
[[workload.priorities]]
name = "high"
priority = 3
weight = 0.1
[[workload.priorities]]
name = "low"
priority = 1
weight = 0.9
[workload.prefix]
groups = 2
length = 32
)", "inline.toml", {"workload.arrival.on_rate=60", "workload.seed=4"});
  EXPECT_EQ(spec.name, "burst-mix");
  EXPECT_EQ(spec.seed, 4u);
  EXPECT_EQ(spec.arrival.kind, ArrivalKind::kBurst);
  EXPECT_EQ(spec.arrival.on_rate_per_s, 60.0);
  EXPECT_EQ(spec.prompt.kind, LengthKind::kLognormal);
  EXPECT_EQ(spec.prompt.mean, 300.0);
  EXPECT_EQ(spec.output.max, 64);
  ASSERT_EQ(spec.priorities.size(), 2u);
  EXPECT_EQ(spec.priorities[0].name, "high");
  EXPECT_EQ(spec.prefix.num_groups, 2);
  EXPECT_EQ(spec.token_id_max, 200);
}

TEST(WorkloadToml, UnknownKeyIsAnErrorNamingIt) {
  try {
    parse_workload_spec("[workload.arrival]\nkind = \"poisson\"\nrat = 5\n", "typo.toml");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("workload.arrival.rat"), std::string::npos) << e.what();
  }
}

TEST(WorkloadToml, BadValuesAreRejectedWhenBuilt) {
  WorkloadSpec spec = parse_workload_spec("[workload.arrival]\nkind = \"poisson\"\nrate = 0\n", "zero.toml");
  EXPECT_THROW(build_workload(spec), Error);
}

// What would be ignored or overflow is refused: a key the arrival kind does not read (set in the
// file or by --set / --sweep), an infinite weight, two classes of one name, and arrivals past the
// span a run's clocks can count (a rate of 1e-10 per second).
TEST(WorkloadToml, KeysValuesAndArrivalsThatCannotMeanWhatTheySayAreRefused) {
  auto message = [](const auto& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string burst = "[workload.arrival]\nkind = \"burst\"\non_s = 1\noff_s = 1\non_rate = 5\n";
  EXPECT_NE(message([&] { parse_workload_spec(burst, "b.toml", {"workload.arrival.rate=2"}); })
                .find("workload.arrival.rate does not apply to kind \"burst\" (it takes on_s, off_s, on_rate, off_rate)"),
            std::string::npos);
  EXPECT_NE(message([&] { parse_workload_spec("[workload.arrival]\nkind = \"offline\"\nconcurrency = 4\n", "o.toml"); })
                .find("takes no other key"),
            std::string::npos);
  const std::string classes = "[[workload.priorities]]\nname = \"a\"\nweight = 1\n[[workload.priorities]]\nname = ";
  EXPECT_NE(message([&] { build_workload(parse_workload_spec(classes + "\"b\"\nweight = inf\n", "w.toml")); })
                .find("weight must be finite"),
            std::string::npos);
  EXPECT_NE(message([&] { build_workload(parse_workload_spec(classes + "\"a\"\nweight = 1\n", "d.toml")); })
                .find("two classes are named \"a\""),
            std::string::npos);
  EXPECT_NE(message([&] {
              build_workload(parse_workload_spec("[workload]\nnum_requests = 3\n[workload.arrival]\nkind = \"poisson\"\n"
                                                 "rate = 1e-10\n", "slow.toml"));
            }).find("past the 1e+09 s a run can span"),
            std::string::npos);
}

}  // namespace
}  // namespace optimate::bench

namespace optimate::bench {
namespace {

// A workload is built whole before it runs, so one that would not fit in memory is refused
// while it is being built, each turn of a conversation counted with the history it carries
// (10 conversations of 2,000 turns of 1,000 + 1,000 tokens ask for about 4 * 10^10 tokens).
TEST(WorkloadBounds, WorkloadsPastMemoryAreRefusedWhileBuilt) {
  WorkloadSpec conversations;
  conversations.num_requests = 10;
  conversations.prompt = {.kind = LengthKind::kFixed, .value = 1000};
  conversations.output = {.kind = LengthKind::kFixed, .value = 1000};
  conversations.conversation = ConversationSpec{.turns = {.kind = LengthKind::kFixed, .value = 2000}};
  EXPECT_THROW(build_workload(conversations), Error);

  WorkloadSpec prefixes;
  prefixes.prefix = {.num_groups = 100'000'000, .length = 1, .fraction = 0.5};
  EXPECT_THROW(build_workload(prefixes), Error);

  // A lognormal's max is a clamp: a large one is taken, and no drawn length passes 2^24.
  WorkloadSpec clamp;
  clamp.num_requests = 4;
  clamp.prompt = {.kind = LengthKind::kLognormal, .min = 1, .max = 1'000'000'000, .mean = 64, .sigma = 0.5};
  EXPECT_NO_THROW(build_workload(clamp));
  clamp.prompt.mean = 1e9;
  EXPECT_THROW(build_workload(clamp), Error);
}

}  // namespace
}  // namespace optimate::bench
