#include "core/choices.h"

#include "core/error.h"

namespace optimate {

void fail_unknown_choice(std::string_view what, std::string_view choices, std::string_view text) {
  fail(ErrorCode::kInvalidArgument, "{} must be {}, got '{}'", what, choices, text);
}

}  // namespace optimate
