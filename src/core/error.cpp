#include "core/error.h"

namespace optimate {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kInvalidFile: return "invalid_file";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

}  // namespace optimate
