// `key.path=value` overrides applied to a parsed TOML document: how --set and --sweep change
// one knob of a workload or engine configuration without editing its file.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <toml++/toml.h>

namespace optimate::bench {

// Splits "predictive.max_wait_ms=50" into key and value text; Error(kInvalidArgument) without '='.
std::pair<std::string, std::string> split_assignment(std::string_view assignment);

// Sets `dotted_key` (tables are created as needed) to `value_text` read as a TOML value, so
// 50, 0.5, true, "fcfs" and [1, 2] keep their types; a bare word is taken as a string.
void set_toml_value(toml::table& doc, std::string_view dotted_key, std::string_view value_text);

}  // namespace optimate::bench
