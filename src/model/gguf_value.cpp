// GgufValue's typed accessors and GGML's tensor type names.
#include <array>

#include "core/error.h"
#include "model/gguf_file.h"

namespace optimate {
namespace {

std::string_view value_type_name(GgufType t) {
  static constexpr std::array<std::string_view, 13> kNames = {
      "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
      "bool",  "string", "array", "uint64", "int64", "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i < kNames.size() ? kNames[i] : "?";
}

[[noreturn]] void wrong_type(const GgufValue& v, std::string_view wanted) {
  if (v.type == GgufType::kArray) {
    fail(ErrorCode::kInvalidFile, "GGUF value is an array of {}, expected {}",
         value_type_name(v.elem_type), wanted);
  }
  fail(ErrorCode::kInvalidFile, "GGUF value is {}, expected {}", value_type_name(v.type), wanted);
}

}  // namespace

int64_t GgufValue::as_int() const {
  if (const auto* p = std::get_if<int64_t>(&value)) return *p;
  if (const auto* b = std::get_if<bool>(&value)) return *b ? 1 : 0;
  wrong_type(*this, "an integer");
}

double GgufValue::as_float() const {
  if (const auto* p = std::get_if<double>(&value)) return *p;
  if (const auto* p = std::get_if<int64_t>(&value)) return static_cast<double>(*p);
  wrong_type(*this, "a number");
}

bool GgufValue::as_bool() const {
  if (const auto* p = std::get_if<bool>(&value)) return *p;
  wrong_type(*this, "a bool");
}

const std::string& GgufValue::as_string() const {
  if (const auto* p = std::get_if<std::string>(&value)) return *p;
  wrong_type(*this, "a string");
}

const std::vector<int64_t>& GgufValue::as_ints() const {
  if (const auto* p = std::get_if<std::vector<int64_t>>(&value)) return *p;
  wrong_type(*this, "an array of integers");
}

const std::vector<double>& GgufValue::as_floats() const {
  if (const auto* p = std::get_if<std::vector<double>>(&value)) return *p;
  wrong_type(*this, "an array of floats");
}

const std::vector<std::string>& GgufValue::as_strings() const {
  if (const auto* p = std::get_if<std::vector<std::string>>(&value)) return *p;
  wrong_type(*this, "an array of strings");
}

std::string_view ggml_type_name(uint32_t ggml_type) {
  // ggml.h, enum ggml_type; ids 4 and 5 (Q4_2, Q4_3) and 31-33 were retired.
  static constexpr std::array<std::string_view, 40> kNames = {
      "F32",   "F16",    "Q4_0",    "Q4_1",   "",      "",       "Q5_0",   "Q5_1",
      "Q8_0",  "Q8_1",   "Q2_K",    "Q3_K",   "Q4_K",  "Q5_K",   "Q6_K",   "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",  "IQ4_XS",
      "I8",    "I16",    "I32",     "I64",    "F64",   "IQ1_M",  "BF16",   "",
      "",      "",       "TQ1_0",   "TQ2_0",  "",      "",       "",       "MXFP4"};
  return ggml_type < kNames.size() ? kNames[ggml_type] : "";
}

}  // namespace optimate
