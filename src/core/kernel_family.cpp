#include "core/kernel_family.h"

#include "core/error.h"

namespace optimate {

void fail_unknown_kernel_family(std::string_view family) {
  fail(ErrorCode::kInvalidArgument, "this runner has no kernel family '{}'", family);
}

}  // namespace optimate
