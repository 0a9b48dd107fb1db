#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "config/engine_cli.h"
#include "config/engine_config.h"
#include "config/settings.h"
#include "core/error.h"

namespace optimate {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(EngineConfig, ParsesEngineAndOptimizerTables) {
  const EngineConfig c = parse_engine_config_toml(R"(
[engine]
model = "models/x.gguf"
max_num_seqs = 64
enable_prefix_caching = false
kv_cache_memory = "512MiB"

[optimizers.priority]
levels = 4
aging_ms = 2.5
mode = "strict"

[optimizers.predictive]
enabled = false
)", "test.toml");
  EXPECT_EQ(c.model, "models/x.gguf");
  EXPECT_EQ(c.max_num_seqs, 64);
  EXPECT_FALSE(c.enable_prefix_caching);
  EXPECT_EQ(c.kv_cache_memory_bytes, 512 * 1024 * 1024);
  ASSERT_EQ(c.optimizers.size(), 2u);
  auto spec = [&](const std::string& name) {
    for (const auto& o : c.optimizers)
      if (o.name == name) return o;
    ADD_FAILURE() << name;
    return OptimizerSpec{};
  };
  EXPECT_EQ(std::get<int64_t>(spec("priority").options.at("levels")), 4);
  EXPECT_EQ(std::get<double>(spec("priority").options.at("aging_ms")), 2.5);
  EXPECT_EQ(std::get<std::string>(spec("priority").options.at("mode")), "strict");
  EXPECT_FALSE(spec("predictive").enabled);
  // The printed configuration reads back to the same thing.
  const EngineConfig again = parse_engine_config_toml(c.to_toml(), "printed");
  EXPECT_EQ(again.to_toml(), c.to_toml());
}

TEST(EngineConfig, ErrorsNameTheKey) {
  EXPECT_NE(error_of([] { parse_engine_config_toml("[engine]\nmax_num_seq = 3\n", "a.toml"); })
                .find("engine.max_num_seq"), std::string::npos);
  EXPECT_NE(error_of([] { parse_engine_config_toml("[engine]\nmax_num_seqs = \"x\"\n", "a.toml"); })
                .find("must be an integer"), std::string::npos);
  EXPECT_NE(error_of([] { parse_engine_config_toml("[engine\n", "broken.toml"); }).find("broken.toml:1"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_engine_config_toml("[server]\nport = 1\n", "a.toml"); }).find("server"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_engine_config_toml("bench = 1\n", "a.toml"); }).find("bench"), std::string::npos);
  EngineConfig c;
  c.block_size = 12;
  EXPECT_NE(error_of([&] { c.validate(); }).find("block-size"), std::string::npos);
  EXPECT_NE(error_of([] { parse_byte_size("4 parsecs", "--kv-cache-memory"); }).find("--kv-cache-memory"),
            std::string::npos);
  EXPECT_EQ(parse_byte_size("1.5GB", "x"), 1500000000);
  EXPECT_EQ(parse_byte_size("2T", "x"), 2000000000000);  // vLLM's sizes take T as well
  EXPECT_EQ(parse_byte_size("1TiB", "x"), int64_t{1} << 40);
}

// A benchmark scenario (a [bench] label beside [engine]) is also a configuration to serve.
TEST(EngineConfig, AScenarioFileServesAsItsEngine) {
  const EngineConfig c = parse_engine_config_toml(
      "[bench]\nlabel = \"FCFS\"\ndescription = \"x\"\n[engine]\nmax_num_seqs = 7\n", "scenario.toml");
  EXPECT_EQ(c.max_num_seqs, 7);
}

TEST(EngineConfig, CliFlagsOverrideTheFile) {
  CLI::App app;
  EngineFlags flags;
  add_engine_flags(app, flags);
  const char* argv[] = {"serve", "--max-num-seqs", "8", "--no-enable-prefix-caching",
                        "--kv-cache-memory", "2GiB", "--optimizer", "predictive:max_wait_ms=50,adaptive=true",
                        "--max-num-batched-tokens", "512", "--scheduling-policy", "priority"};
  app.parse(static_cast<int>(std::size(argv)), argv);
  const EngineConfig c = resolve_engine_config(flags);
  EXPECT_EQ(c.max_num_seqs, 8);
  EXPECT_EQ(c.max_num_batched_tokens, 512);
  EXPECT_FALSE(c.enable_prefix_caching);
  EXPECT_EQ(c.kv_cache_memory_bytes, int64_t{2} << 30);
  // --scheduling-policy priority is vLLM's spelling of enabling the priority optimizer.
  ASSERT_EQ(c.optimizers.size(), 2u);
  EXPECT_EQ(c.optimizers[0].name, "priority");
  EXPECT_EQ(std::get<int64_t>(c.optimizers[1].options.at("max_wait_ms")), 50);
  EXPECT_TRUE(std::get<bool>(c.optimizers[1].options.at("adaptive")));

  CLI::App bad;
  EngineFlags bad_flags;
  add_engine_flags(bad, bad_flags);
  const char* bad_argv[] = {"serve", "--max-num-seqs", "0"};
  bad.parse(3, bad_argv);
  EXPECT_NE(error_of([&] { resolve_engine_config(bad_flags); }).find("max-num-seqs"), std::string::npos);
}

TEST(EngineConfig, BackendSettingsFromFlagsAndTomlRoundTrip) {
  CLI::App app;
  EngineFlags flags;
  add_engine_flags(app, flags);
  const char* argv[] = {"serve", "--device", "cuda", "--load-format", "dummy", "--gpu-memory-utilization",
                        "0.5", "--tokenizer", "models/llama3-tokenizer"};
  app.parse(static_cast<int>(std::size(argv)), argv);
  const EngineConfig c = resolve_engine_config(flags);
  EXPECT_EQ(c.device, Device::kCuda);
  EXPECT_EQ(c.load_format, LoadFormat::kDummy);
  EXPECT_DOUBLE_EQ(c.gpu_memory_utilization, 0.5);
  EXPECT_EQ(c.tokenizer, "models/llama3-tokenizer");
  // --print-config's TOML reads back to the same settings.
  const EngineConfig back = parse_engine_config_toml(c.to_toml(), "printed.toml");
  EXPECT_EQ(back.device, Device::kCuda);
  EXPECT_EQ(back.load_format, LoadFormat::kDummy);
  EXPECT_DOUBLE_EQ(back.gpu_memory_utilization, 0.5);
  EXPECT_EQ(back.tokenizer, "models/llama3-tokenizer");
}

TEST(EngineConfig, BadBackendSettingsNameTheFlag) {
  for (const auto& [set, flag] : std::vector<std::pair<std::function<void(EngineConfig&)>, std::string>>{
           {[](EngineConfig& c) { c.gpu_memory_utilization = 0.0; }, "gpu-memory-utilization"},
           {[](EngineConfig& c) { c.gpu_memory_utilization = 1.5; }, "gpu-memory-utilization"},
           {[](EngineConfig& c) { c.max_num_seqs_capacity = 100; }, "max-num-seqs-capacity"},
           {[](EngineConfig& c) { c.max_num_batched_tokens_capacity = 1000; }, "max-num-batched-tokens-capacity"}}) {
    EngineConfig c;
    set(c);
    EXPECT_NE(error_of([&] { c.validate(); }).find(flag), std::string::npos) << flag;
  }
  EXPECT_NE(error_of([] { parse_engine_config_toml("[engine]\ngpu_memory_utilization = \"most\"\n", "a.toml"); })
                .find("engine.gpu_memory_utilization"), std::string::npos);
  // A name outside a choice's table is refused where it is read, naming the flag and the choices.
  for (const auto& [flag, value, choices] : {std::tuple{"--device", "tpu", "auto, cpu or cuda"},
                                             {"--load-format", "pt", "auto, gguf, safetensors or dummy"},
                                             {"--kv-cache-dtype", "fp32", "int8 or int4"}}) {
    CLI::App app;
    EngineFlags flags;
    add_engine_flags(app, flags);
    const char* argv[] = {"serve", flag, value};
    app.parse(3, argv);
    const std::string error = error_of([&] { resolve_engine_config(flags); });
    EXPECT_NE(error.find(flag), std::string::npos) << error;
    EXPECT_NE(error.find(choices), std::string::npos) << error;
  }
  EXPECT_NE(error_of([] { parse_engine_config_toml("[engine]\ndevice = \"tpu\"\n", "a.toml"); }).find("engine.device"),
            std::string::npos);
}

TEST(EngineConfig, PriorityOrderFromFlagAndToml) {
  CLI::App app;
  EngineFlags flags;
  add_engine_flags(app, flags);
  const char* argv[] = {"serve", "--priority-order", "lower-first"};
  app.parse(static_cast<int>(std::size(argv)), argv);
  const EngineConfig c = resolve_engine_config(flags);
  EXPECT_EQ(c.priority_order, PriorityOrder::kLowerFirst);
  EXPECT_EQ(parse_engine_config_toml(c.to_toml(), "printed.toml").priority_order, PriorityOrder::kLowerFirst);
  EXPECT_NE(error_of([] { parse_engine_config_toml("[engine]\npriority_order = \"lowest\"\n", "a.toml"); })
                .find("engine.priority_order"), std::string::npos);
}

TEST(EngineSettings, TheDocumentedTableIsTheSettingsTable) {
  // docs/configuration.md carries `optimate settings`' output between two markers.
  std::ifstream in(std::string(OPTIMATE_TEST_DATA_DIR) + "/../../docs/configuration.md");
  ASSERT_TRUE(in) << "docs/configuration.md not found";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string begin = "<!-- settings-table: generated by `optimate settings` -->\n";
  const size_t a = doc.find(begin);
  const size_t b = doc.find("<!-- end settings-table -->");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  EXPECT_EQ(doc.substr(a + begin.size(), b - a - begin.size()), settings_markdown())
      << "regenerate the table with `optimate settings`";
}

TEST(EngineSettings, EverySettingHasAFlagAKeyAndReadsBackItsDefault) {
  EngineConfig defaults;
  for (const SettingInfo& s : engine_settings()) {
    EXPECT_EQ(s.flag.substr(0, 2), "--") << s.key;
    EXPECT_FALSE(s.help.empty()) << s.key;
    if (s.kind == SettingKind::kOptimizerAlias) continue;
    EXPECT_EQ(s.to_toml(defaults), s.default_toml) << s.key;
    EXPECT_NO_THROW(s.check(defaults)) << s.key;
  }
  // The vLLM spelling enables the optimizer it names, once.
  EngineConfig c = parse_engine_config_toml("[engine]\nscheduling_policy = \"priority\"\n", "a.toml");
  ASSERT_EQ(c.optimizers.size(), 1u);
  EXPECT_EQ(c.optimizers[0].name, "priority");
  EXPECT_TRUE(parse_engine_config_toml("[engine]\nscheduling_policy = \"fcfs\"\n", "a.toml").optimizers.empty());
}

}  // namespace
}  // namespace optimate
