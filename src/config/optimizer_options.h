// Options of one optimizer as written in `[optimizers.NAME]` of the TOML file or given on the
// command line: plain typed values keyed by name, interpreted by the optimizer's factory.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace optimate {

using OptionValue = std::variant<bool, int64_t, double, std::string>;
using OptionMap = std::map<std::string, OptionValue>;

struct OptimizerSpec {
  std::string name;
  OptionMap options;
  bool enabled = true;  // `enabled = false` in the table keeps the options but skips it
};

}  // namespace optimate
