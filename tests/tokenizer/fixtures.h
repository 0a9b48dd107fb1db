// Shared access to the tokenizer fixtures (tests/data/tokenizer, made by
// tests/scripts/make_tokenizer_fixtures.py) and to the tokenizers under test, loaded once.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace optimate::testing {

inline std::string data_path(const std::string& name) {
  return std::string(OPTIMATE_TEST_DATA_DIR) + "/tokenizer/" + name;
}
inline std::string models_path(const std::string& name) {
  return std::string(OPTIMATE_MODELS_DIR) + "/" + name;
}

inline nlohmann::json read_fixture(const std::string& name) {
  std::ifstream in(data_path(name), std::ios::binary);
  EXPECT_TRUE(in) << "missing fixture " << data_path(name);
  return nlohmann::json::parse(in);
}

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// The input of an encode case: "text", or raw (possibly invalid UTF-8) bytes as "bytes_hex".
inline std::string case_input(const nlohmann::json& c) {
  return c.contains("bytes_hex") ? from_hex(c.at("bytes_hex").get<std::string>()) : c.at("text").get<std::string>();
}

// The tokenizers under test; nullptr (and the test skips) when the model file is absent.
inline std::shared_ptr<const Tokenizer> load_cached(const std::string& path) {
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  auto& slot = cache[path];
  if (!slot && std::filesystem::exists(path)) slot = Tokenizer::load(path);
  return slot;
}
inline std::shared_ptr<const Tokenizer> smollm2() { return load_cached(models_path("SmolLM2-135M-Instruct.Q4_1.gguf")); }
inline std::shared_ptr<const Tokenizer> llama3() { return load_cached(models_path("llama3-tokenizer")); }
inline std::shared_ptr<const Tokenizer> spm_json() { return load_cached(data_path("spm_tiny")); }
inline std::shared_ptr<const Tokenizer> spm_gguf() { return load_cached(data_path("spm_tiny.gguf")); }

#define OPTIMATE_REQUIRE_TOKENIZER(tok)                                     \
  do {                                                                     \
    if (!(tok)) GTEST_SKIP() << "model files not present under models/";   \
  } while (0)

}  // namespace optimate::testing
