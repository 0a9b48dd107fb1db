#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/error.h"
#include "metrics/prometheus_text.h"
#include "metrics/registry.h"

namespace optimate::metrics {
namespace {

TEST(Registry, RejectsNamesPrometheusWouldRefuse) {
  Registry r;
  EXPECT_THROW(r.gauge("9lives", "h"), Error);
  EXPECT_THROW(r.gauge("has-dash", "h"), Error);
  EXPECT_THROW(r.gauge("ok", "h", {"bad:label"}), Error);
  EXPECT_THROW(r.gauge("ok2", "h", {"__reserved"}), Error);
  EXPECT_THROW(r.histogram("h", "h", {1, 2}, {"le"}), Error);
  EXPECT_THROW(r.histogram("h2", "h", {2, 1}), Error);
  EXPECT_NO_THROW(r.gauge("vllm:num_requests_running", "h", {"model_name"}));
}

TEST(Registry, RejectsCollidingSeries) {
  Registry r;
  r.counter("x", "h");
  EXPECT_THROW(r.gauge("x_total", "h"), Error);  // the counter already exports x_total
  EXPECT_THROW(r.counter("x_total", "h"), Error);  // same counter, suffix given explicitly
  r.histogram("lat", "h", {1});
  EXPECT_THROW(r.gauge("lat_bucket", "h"), Error);
  EXPECT_THROW(r.gauge("lat", "h"), Error);
}

TEST(Registry, CounterSuffixIsAddedOnce) {
  Registry r;
  r.counter("vllm:prompt_tokens_total", "h").get().inc(2);
  EXPECT_EQ(r.render(),
            "# HELP vllm:prompt_tokens_total h\n# TYPE vllm:prompt_tokens_total counter\n"
            "vllm:prompt_tokens_total 2.0\n");
}

TEST(Registry, LabelCountMustMatch) {
  Registry r;
  auto& f = r.counter("c", "h", {"a", "b"});
  EXPECT_THROW(f.labels({"only-one"}), Error);
  EXPECT_EQ(&f.labels({"1", "2"}), &f.labels({"1", "2"}));  // stable child handle
}

TEST(Registry, CountersIgnoreNegativeIncrements) {
  Registry r;
  auto& c = r.counter("c", "h").get();
  c.inc(5);
  c.inc(-3);
  EXPECT_EQ(c.value(), 5);
}

TEST(Registry, CollectHooksRunBeforeEachScrape) {
  Registry r;
  auto& g = r.gauge("queue", "h").get();
  int calls = 0;
  r.add_collect_hook([&] { g.set(++calls); });
  EXPECT_NE(r.render().find("queue 1.0\n"), std::string::npos);
  EXPECT_NE(r.render().find("queue 2.0\n"), std::string::npos);
}

TEST(Registry, ConcurrentUpdatesAreNotLost) {
  Registry r;
  auto& family = r.counter("c", "h", {"worker"});
  auto& hist = r.histogram("h", "h", {0.5}).get();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        family.labels({std::to_string(i % 3)}).inc();
        hist.observe(t % 2 ? 0.25 : 0.75);
        if (i % 1000 == 0) (void)r.render();  // scrapes race with updates
      }
    });
  for (auto& th : threads) th.join();
  double total = 0;
  for (int w = 0; w < 3; ++w) total += family.labels({std::to_string(w)}).value();
  EXPECT_EQ(total, 40000);
  auto snap = hist.snapshot();
  EXPECT_EQ(snap.count(), 40000u);
  EXPECT_EQ(snap.cumulative_counts[0], 20000u);
  EXPECT_DOUBLE_EQ(snap.sum, 20000 * 0.25 + 20000 * 0.75);
}

TEST(Histogram, UpperBoundsAreInclusive) {
  Histogram h({0.1, 1.0});
  h.observe(0.1);
  h.observe(1.0);
  h.observe(1.0000001);
  auto snap = h.snapshot();
  EXPECT_EQ(snap.cumulative_counts, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(Histogram, NanIsDropped) {
  Histogram h({1.0});
  h.observe(std::nan(""));
  EXPECT_EQ(h.snapshot().count(), 0u);
  EXPECT_EQ(h.snapshot().sum, 0.0);
}

TEST(Buckets, OneTwoFiveUpToMax) {
  EXPECT_EQ(buckets_1_2_5(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(buckets_1_2_5(8192), (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000,
                                                      2000, 5000}));
}

TEST(PrometheusText, NameRules) {
  EXPECT_TRUE(is_valid_metric_name("optimate:batch_size"));
  EXPECT_FALSE(is_valid_metric_name(""));
  EXPECT_FALSE(is_valid_metric_name("a b"));
  EXPECT_TRUE(is_valid_label_name("finished_reason"));
  EXPECT_FALSE(is_valid_label_name("1x"));
}

}  // namespace
}  // namespace optimate::metrics
