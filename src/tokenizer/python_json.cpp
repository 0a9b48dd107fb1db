#include "tokenizer/python_json.h"

namespace optimate {
namespace {

void write(const nlohmann::ordered_json& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, item] : v.items()) {
      if (!first) out += ", ";
      first = false;
      out += nlohmann::ordered_json(key).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
      out += ": ";
      write(item, out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      write(v[i], out);
    }
    out += ']';
  } else {
    out += v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
}

}  // namespace

std::string python_json(const nlohmann::ordered_json& value, int indent) {
  // With an indent Python's separators are "," and ": ", as nlohmann's pretty printer writes.
  if (indent >= 0) return value.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  std::string out;
  write(value, out);
  return out;
}

}  // namespace optimate
