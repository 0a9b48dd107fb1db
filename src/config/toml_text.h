// How the configuration writes values as TOML text (--print-config): one quoting rule and one
// number format for the settings table and the optimizer options.
#pragma once

#include <string>
#include <string_view>

namespace optimate {

std::string toml_quote(std::string_view s);
// Shortest round-tripping form that TOML reads back as a float ("2.0", not "2").
std::string toml_double(double d);

}  // namespace optimate
