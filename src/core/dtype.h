// Element types of tensors, including the block-quantized GGUF formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace optimate {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // blocks of 32: fp16 scale + 32 int8
  kQ4_0,  // blocks of 32: fp16 scale + 16 bytes of nibbles
  kQ4_1,  // blocks of 32: fp16 scale + fp16 min + 16 bytes of nibbles
  kQ4_K,  // super-blocks of 256
  kQ5_K,  // super-blocks of 256
  kQ6_K,  // super-blocks of 256
  kI8,
  kI32,
};

std::string_view dtype_name(DType t);

// Elements per quantization block (1 for plain types).
size_t dtype_block_elems(DType t);
// Bytes per quantization block (element size for plain types).
size_t dtype_block_bytes(DType t);

// Bytes needed for `num_elems` elements; num_elems must be a multiple of the block size.
inline size_t dtype_row_bytes(DType t, size_t num_elems) {
  return num_elems / dtype_block_elems(t) * dtype_block_bytes(t);
}

}  // namespace optimate
