// JSON text as Python's json.dumps(value, ensure_ascii=False) writes it, which is what chat
// templates' `tojson` filter and vLLM's tool parsers produce: keys in their order, ", " and
// ": " between items (or, with an indent, one item per line and "," at line ends).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace optimate {

std::string python_json(const nlohmann::ordered_json& value, int indent = -1);

}  // namespace optimate
