// What a reload compares: which settings changed and whether they may change while the engine
// runs, and when the file's content changed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "config/config_diff.h"
#include "config/config_watcher.h"
#include "config/engine_config.h"
#include "core/error.h"

namespace optimate {
namespace {

TEST(ConfigDiff, NamesEachChangedSettingAndWhetherItIsHot) {
  EngineConfig a;
  EngineConfig b = a;
  EXPECT_TRUE(diff_configs(a, b).empty());
  b.max_num_seqs = 64;
  b.block_size = 32;
  b.optimizers = {{"priority", {{"levels", int64_t{3}}}, true}, {"predictive", {}, false}};
  const std::vector<SettingDiff> d = diff_configs(a, b);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].key, "max_num_seqs");
  EXPECT_EQ(d[0].from, "256");
  EXPECT_EQ(d[0].to, "64");
  EXPECT_TRUE(d[0].hot);
  EXPECT_EQ(d[1].key, "block_size");
  EXPECT_FALSE(d[1].hot);
  EXPECT_EQ(d[2].key, "optimizers");
  EXPECT_EQ(d[2].to, "priority, predictive (disabled)");
  // An option's value counts too.
  EngineConfig c = b;
  c.optimizers[0].options["levels"] = int64_t{4};
  EXPECT_FALSE(same_optimizers(b.optimizers, c.optimizers));
}

TEST(ConfigDiff, CopiesOnlyHotSettings) {
  EngineConfig from;
  from.max_num_batched_tokens = 4096;
  from.optimizer_watchdog_ms = 10;
  from.model = "other";
  EngineConfig to;
  copy_hot_settings(from, to);
  EXPECT_EQ(to.max_num_batched_tokens, 4096);
  EXPECT_EQ(to.optimizer_watchdog_ms, 10);
  EXPECT_EQ(to.model, "");
}

TEST(ConfigWatcher, ReportsEachChangeOfContentOnce) {
  const std::string path = ::testing::TempDir() + "/watched.toml";
  auto write = [&](const char* text) {
    std::ofstream(path, std::ios::trunc) << text;
  };
  write("[engine]\nmax_num_seqs = 8\n");
  ConfigWatcher w(path);
  EXPECT_FALSE(w.changed());
  write("[engine]\nmax_num_seqs = 8\n");  // rewritten, same content
  EXPECT_FALSE(w.changed());
  write("[engine]\nmax_num_seqs = 16\n");
  EXPECT_TRUE(w.changed());
  EXPECT_FALSE(w.changed());
  std::filesystem::remove(path);  // gone (an editor's rename in progress): nothing to reload
  EXPECT_FALSE(w.changed());
  write("[engine]\nmax_num_seqs = 16\n");
  EXPECT_FALSE(w.changed());
}

// What load_engine_config_file throws for `path` ("" when it loads).
std::string load_error(const std::string& path) {
  try {
    load_engine_config_file(path);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(ConfigFile, AnEmptyFileOrADirectoryIsRefusedNotReadAsDefaults) {
  const std::string dir = ::testing::TempDir() + "/config-refusals";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/engine.toml");  // a directory where the file was
  EXPECT_NE(load_error(dir + "/engine.toml").find("is a directory"), std::string::npos);
  for (const char* text : {"", "\n  \n", "# all commented out\n# max_num_seqs = 4\n"}) {
    std::ofstream(dir + "/empty.toml", std::ios::trunc) << text;
    EXPECT_NE(load_error(dir + "/empty.toml").find("is empty"), std::string::npos) << '"' << text << '"';
  }
  // An empty [engine] table says "the defaults" on purpose.
  std::ofstream(dir + "/defaults.toml", std::ios::trunc) << "[engine]\n";
  EXPECT_EQ(load_error(dir + "/defaults.toml"), "");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace optimate
