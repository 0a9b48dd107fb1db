#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

namespace optimate {

void set_log_level(std::string_view level) {
  static const bool once = [] {
    // Logs go to stderr so that stdout stays clean for generated text and JSON.
    auto logger = spdlog::stderr_color_mt("optimate");
    spdlog::set_default_logger(logger);
    return true;
  }();
  (void)once;
  const auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off")
    fail(ErrorCode::kInvalidArgument, "unknown log level '{}'", level);
  spdlog::set_level(parsed);
}

}  // namespace optimate
