#include "bench/toml_override.h"

#include "core/error.h"

namespace optimate::bench {

std::pair<std::string, std::string> split_assignment(std::string_view assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0)
    fail(ErrorCode::kInvalidArgument, "expected key=value, got \"{}\"", assignment);
  return {std::string(assignment.substr(0, eq)), std::string(assignment.substr(eq + 1))};
}

void set_toml_value(toml::table& doc, std::string_view dotted_key, std::string_view value_text) {
  toml::table* table = &doc;
  std::string_view rest = dotted_key;
  for (size_t dot; (dot = rest.find('.')) != std::string_view::npos; rest = rest.substr(dot + 1)) {
    const std::string part(rest.substr(0, dot));
    if (part.empty()) fail(ErrorCode::kInvalidArgument, "empty component in key \"{}\"", dotted_key);
    toml::node* node = table->get(part);
    if (!node) node = &table->insert_or_assign(part, toml::table{}).first->second;
    if (!node->is_table())
      fail(ErrorCode::kInvalidArgument, "key \"{}\": \"{}\" is not a table", dotted_key, part);
    table = node->as_table();
  }
  const std::string leaf(rest);
  if (leaf.empty()) fail(ErrorCode::kInvalidArgument, "empty key in \"{}\"", dotted_key);

  // Parse "v = <text>" so the value keeps its TOML type; fall back to a plain string.
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + std::string(value_text));
  } catch (const toml::parse_error&) {
    table->insert_or_assign(leaf, std::string(value_text));
    return;
  }
  parsed.get("v")->visit([&](const auto& value) { table->insert_or_assign(leaf, value); });
}

}  // namespace optimate::bench
