// Logging goes through spdlog; this header fixes the project's logger setup in one place.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace optimate {

// Sets the global level from a name: trace, debug, info, warn, error, off.
void set_log_level(std::string_view level);

}  // namespace optimate
