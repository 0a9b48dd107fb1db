// KV pool growth and release are visible at debug level (the seed's section 5.4: the memory
// pool's allocations and releases), one line per sequence that grows or gives its blocks back.
#include <gtest/gtest.h>

#include <sstream>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "kv/kv_cache_manager.h"

namespace optimate::kv {
namespace {

// Routes the default logger into a string at `level` for the test's lifetime.
class CapturedLog {
 public:
  explicit CapturedLog(spdlog::level::level_enum level)
      : previous_(spdlog::default_logger()),
        logger_(std::make_shared<spdlog::logger>("captured", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_))) {
    logger_->set_level(level);
    logger_->set_pattern("%l %v");
    spdlog::set_default_logger(logger_);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_, logger_;
};

TEST(KvPoolLog, GrowthAndReleaseAtDebugLevel) {
  std::string debug_text;
  {
    CapturedLog log(spdlog::level::debug);
    KvCacheManager kv(8, 4, /*enable_prefix_caching=*/false);
    ASSERT_TRUE(kv.allocate(1, 0, 10, {}, KvPrecision::kF32));  // 3 blocks of 4 tokens
    ASSERT_TRUE(kv.allocate(1, 10, 4, {}, KvPrecision::kF32));  // one more
    kv.free(1);
    debug_text = log.text();
  }
  EXPECT_NE(debug_text.find("debug KV pool: sequence 1 grows by 3 f32 blocks (0 prefix-cache hits, 0 restored from "
                            "the host tier) to 3; 37.5% of the pool in use"),
            std::string::npos) << debug_text;
  EXPECT_NE(debug_text.find("grows by 1 f32 blocks"), std::string::npos) << debug_text;
  EXPECT_NE(debug_text.find("debug KV pool: sequence 1 releases 4 blocks; 0.0% of the pool in use"), std::string::npos)
      << debug_text;

  CapturedLog quiet(spdlog::level::info);  // nothing at the default levels
  KvCacheManager kv(8, 4, false);
  ASSERT_TRUE(kv.allocate(2, 0, 4, {}, KvPrecision::kF32));
  kv.free(2);
  EXPECT_EQ(quiet.text(), "");
}

}  // namespace
}  // namespace optimate::kv
