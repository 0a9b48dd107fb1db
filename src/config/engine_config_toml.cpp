// TOML reading of EngineConfig; the only file that includes toml++.
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "config/engine_config.h"
#include "core/error.h"

namespace optimate {
namespace {

[[noreturn]] void bad_key(const std::string& source, const std::string& key, const char* rule) {
  fail(ErrorCode::kInvalidFile, "{}: {} must be {}", source, key, rule);
}

int64_t get_int(const toml::node& node, const std::string& source, const std::string& key) {
  if (auto v = node.value_exact<int64_t>()) return *v;
  bad_key(source, key, "an integer");
}

bool get_bool(const toml::node& node, const std::string& source, const std::string& key) {
  if (auto v = node.value_exact<bool>()) return *v;
  bad_key(source, key, "a boolean");
}

double get_double(const toml::node& node, const std::string& source, const std::string& key) {
  if (auto v = node.value<double>()) return *v;
  bad_key(source, key, "a number");
}

std::string get_string(const toml::node& node, const std::string& source, const std::string& key) {
  if (auto v = node.value_exact<std::string>()) return *v;
  bad_key(source, key, "a string");
}

void read_engine_table(const toml::table& table, const std::string& source, EngineConfig& c) {
  for (const auto& [k, node] : table) {
    const std::string key(k.str());
    const std::string where = "engine." + key;
    if (key == "model") c.model = get_string(node, source, where);
    else if (key == "tokenizer") c.tokenizer = get_string(node, source, where);
    else if (key == "device") c.device = get_string(node, source, where);
    else if (key == "load_format") c.load_format = get_string(node, source, where);
    else if (key == "gpu_memory_utilization") c.gpu_memory_utilization = get_double(node, source, where);
    else if (key == "max_num_seqs") c.max_num_seqs = get_int(node, source, where);
    else if (key == "max_num_batched_tokens") c.max_num_batched_tokens = get_int(node, source, where);
    else if (key == "max_model_len") c.max_model_len = get_int(node, source, where);
    else if (key == "block_size") c.block_size = get_int(node, source, where);
    else if (key == "enable_prefix_caching") c.enable_prefix_caching = get_bool(node, source, where);
    else if (key == "kv_cache_dtype") c.kv_cache_dtype = get_string(node, source, where);
    else if (key == "num_kv_blocks") c.num_kv_blocks = get_int(node, source, where);
    else if (key == "kv_cache_memory") {
      if (node.is_string()) c.kv_cache_memory_bytes = parse_byte_size(*node.value<std::string>(), where);
      else c.kv_cache_memory_bytes = get_int(node, source, where);
    } else if (key == "scheduling_policy") c.scheduling_policy = get_string(node, source, where);
    else if (key == "priority_order") {
      try {
        c.priority_order = parse_priority_order(get_string(node, source, where), where);
      } catch (const Error& e) {
        fail(ErrorCode::kInvalidFile, "{}: {}", source, e.what());
      }
    }
    else if (key == "seed") {
      const int64_t seed = get_int(node, source, where);
      if (seed < 0) bad_key(source, where, "non-negative");
      c.seed = static_cast<uint64_t>(seed);
    } else if (key == "num_threads") c.num_threads = get_int(node, source, where);
    else fail(ErrorCode::kInvalidFile, "{}: unknown key {}", source, where);
  }
}

OptimizerSpec read_optimizer_table(const std::string& name, const toml::table& table,
                                   const std::string& source) {
  OptimizerSpec spec;
  spec.name = name;
  for (const auto& [k, node] : table) {
    const std::string key(k.str());
    const std::string where = "optimizers." + name + "." + key;
    if (key == "enabled") { spec.enabled = get_bool(node, source, where); continue; }
    if (auto b = node.value_exact<bool>()) spec.options[key] = *b;
    else if (auto i = node.value_exact<int64_t>()) spec.options[key] = *i;
    else if (auto d = node.value_exact<double>()) spec.options[key] = *d;
    else if (auto s = node.value_exact<std::string>()) spec.options[key] = *s;
    else bad_key(source, where, "a boolean, number or string");
  }
  return spec;
}

}  // namespace

EngineConfig parse_engine_config_toml(std::string_view text, const std::string& source,
                                      EngineConfig base) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    fail(ErrorCode::kInvalidFile, "{}:{}:{}: {}", source, e.source().begin.line,
         e.source().begin.column, std::string(e.description()));
  }
  EngineConfig c = std::move(base);
  for (const auto& [k, node] : root) {
    const std::string key(k.str());
    if (key == "engine") {
      if (!node.is_table()) bad_key(source, "engine", "a table");
      read_engine_table(*node.as_table(), source, c);
    } else if (key == "optimizers") {
      if (!node.is_table()) bad_key(source, "optimizers", "a table of [optimizers.NAME] tables");
      for (const auto& [name, opt] : *node.as_table()) {
        const std::string n(name.str());
        if (!opt.is_table()) bad_key(source, "optimizers." + n, "a table");
        OptimizerSpec spec = read_optimizer_table(n, *opt.as_table(), source);
        // A TOML table replaces an optimizer of the same name from an earlier layer.
        std::erase_if(c.optimizers, [&](const OptimizerSpec& o) { return o.name == n; });
        c.optimizers.push_back(std::move(spec));
      }
    } else {
      fail(ErrorCode::kInvalidFile, "{}: unknown table or key '{}' (expected [engine] or "
           "[optimizers.NAME])", source, key);
    }
  }
  return c;
}

EngineConfig load_engine_config_file(const std::string& path, EngineConfig base) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::kNotFound, "cannot open config file {}", path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_engine_config_toml(text.str(), path, std::move(base));
}

}  // namespace optimate
