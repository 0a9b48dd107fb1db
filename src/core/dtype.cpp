#include "core/dtype.h"

namespace optimate {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kQ8_0: return "Q8_0";
    case DType::kQ4_0: return "Q4_0";
    case DType::kQ4_1: return "Q4_1";
    case DType::kQ4_K: return "Q4_K";
    case DType::kQ5_K: return "Q5_K";
    case DType::kQ6_K: return "Q6_K";
    case DType::kI8: return "I8";
    case DType::kI32: return "I32";
  }
  return "?";
}

size_t dtype_block_elems(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1: return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return 256;
    default: return 1;
  }
}

size_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kQ8_0: return 2 + 32;
    case DType::kQ4_0: return 2 + 16;
    case DType::kQ4_1: return 2 + 2 + 16;
    case DType::kQ4_K: return 2 + 2 + 12 + 128;
    case DType::kQ5_K: return 2 + 2 + 12 + 32 + 128;
    case DType::kQ6_K: return 128 + 64 + 16 + 2;
    case DType::kI8: return 1;
    case DType::kI32: return 4;
  }
  return 1;
}

}  // namespace optimate
