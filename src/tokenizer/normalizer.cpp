#include "tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace optimate::tokenizer {

Normalizer Normalizer::from_json(const nlohmann::json& value) {
  Normalizer n;
  if (!value.is_null()) n.add_json(value);
  return n;
}

void Normalizer::add_json(const nlohmann::json& v) {
  const std::string type = v.value("type", "");
  if (type == "Sequence") {
    for (const auto& step : v.at("normalizers")) add_json(step);
  } else if (type == "Prepend") {
    ops_.push_back({true, "", v.at("prepend").get<std::string>()});
  } else if (type == "Replace" && v.at("pattern").contains("String")) {
    ops_.push_back({false, v.at("pattern").at("String").get<std::string>(),
                    v.at("content").get<std::string>()});
  } else {
    fail(ErrorCode::kUnsupported, "normalizer {} is not supported", v.dump());
  }
}

Normalizer Normalizer::sentencepiece(bool add_dummy_prefix) {
  Normalizer n;
  if (add_dummy_prefix) n.ops_.push_back({true, "", std::string(kMetaspace)});
  n.ops_.push_back({false, " ", std::string(kMetaspace)});
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const Op& op : ops_) {
    if (op.prepend) {
      if (!s.empty()) s.insert(0, op.to);
      continue;
    }
    if (op.from.empty()) continue;
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    for (size_t hit; (hit = s.find(op.from, pos)) != std::string::npos; pos = hit + op.from.size()) {
      out.append(s, pos, hit - pos);
      out.append(op.to);
    }
    out.append(s, pos);
    s.swap(out);
  }
  return s;
}

}  // namespace optimate::tokenizer
