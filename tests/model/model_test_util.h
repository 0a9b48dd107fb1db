// Fixture access for the model tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace optimate::testing {

inline std::string model_fixture(const std::string& name) {
  return std::string(OPTIMATE_TEST_DATA_DIR) + "/model/" + name;
}

inline std::string smollm2_path() {
  return std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str());
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::stoi(hex.substr(2 * i, 2), nullptr, 16);
  return out;
}

}  // namespace optimate::testing
