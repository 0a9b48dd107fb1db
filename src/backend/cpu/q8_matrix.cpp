#include "backend/cpu/q8_matrix.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/q8_weight_row.h"
#include "backend/cpu/quantized_linear.h"
#include "core/error.h"
#include "core/half.h"

namespace optimate::cpu {

Q8Matrix pack_q8_matrix(const CpuMatrix& w) {
  OPTIMATE_CHECK(w.is_quantized() && has_q8_kernel(w.dtype, w.cols), "no integer kernel for {} rows of {}",
                 dtype_name(w.dtype), w.cols);
  Q8Matrix m;
  m.rows = w.rows;
  m.cols = w.cols;
  m.units = (w.cols + 63) / 64;
  m.group = w.dtype == DType::kQ6_K ? 16 : 32;
  m.four_bit = w.dtype == DType::kQ4_0 || w.dtype == DType::kQ4_1 || w.dtype == DType::kQ4_K;
  m.biased = w.dtype == DType::kQ8_0;
  m.half_scales = w.dtype == DType::kQ8_0 || w.dtype == DType::kQ4_0 || w.dtype == DType::kQ4_1;
  const int64_t groups = 64 / m.group, scale_bytes = m.half_scales ? 2 : 4;
  m.unit_bytes = m.value_bytes() + 2 * groups * scale_bytes;
  m.data.assign(static_cast<size_t>(m.rows * m.units * m.unit_bytes), 0);
  UnpackedRow row;
  for (int64_t r = 0; r < m.rows; ++r) {
    unpack_weight_row(w, r, /*signed_q8=*/false, row);
    for (int64_t u = 0; u < m.units; ++u) {
      uint8_t* p = m.data.data() + (r * m.units + u) * m.unit_bytes;
      const int64_t c0 = 64 * u, n = std::min<int64_t>(64, m.cols - c0);
      if (m.four_bit)
        for (int64_t j = 0; j < 32; ++j)
          p[j] = static_cast<uint8_t>((j < n ? row.q[c0 + j] : 0) | (j + 32 < n ? row.q[c0 + j + 32] << 4 : 0));
      else
        std::memcpy(p, row.q.data() + c0, static_cast<size_t>(n));
      uint8_t* scales = p + m.value_bytes();
      for (int64_t g = 0; g < groups && g * m.group < n; ++g) {
        // UnpackedRow holds one scale and offset per 16 weights.
        const float sc = row.scale[(c0 + g * m.group) / kWeightGroup];
        const float off = row.offset[(c0 + g * m.group) / kWeightGroup];
        if (m.half_scales) {
          const uint16_t hs = f32_to_f16(sc), ho = f32_to_f16(off);
          OPTIMATE_CHECK(f16_to_f32(hs) == sc && f16_to_f32(ho) == off,
                         "{} row {}: scale {} or offset {} is not an fp16 value", dtype_name(w.dtype), r, sc, off);
          std::memcpy(scales + 2 * g, &hs, 2);
          std::memcpy(scales + 2 * (groups + g), &ho, 2);
        } else {
          std::memcpy(scales + 4 * g, &sc, 4);
          std::memcpy(scales + 4 * (groups + g), &off, 4);
        }
      }
    }
  }
  return m;
}

void dequantize_q8_row(const Q8Matrix& m, int64_t r, float* dst) {
  OPTIMATE_CHECK(r >= 0 && r < m.rows, "row {} of {}", r, m.rows);
  const int64_t groups = 64 / m.group;
  for (int64_t u = 0; u < m.units; ++u) {
    const uint8_t* p = m.row(r) + u * m.unit_bytes;
    float scale[4], offset[4];
    for (int64_t g = 0; g < groups; ++g) {
      if (m.half_scales) {
        uint16_t hs, ho;
        std::memcpy(&hs, p + m.value_bytes() + 2 * g, 2);
        std::memcpy(&ho, p + m.value_bytes() + 2 * (groups + g), 2);
        scale[g] = f16_to_f32(hs);
        offset[g] = f16_to_f32(ho);
      } else {
        std::memcpy(&scale[g], p + m.value_bytes() + 4 * g, 4);
        std::memcpy(&offset[g], p + m.value_bytes() + 4 * (groups + g), 4);
      }
    }
    for (int64_t j = 0; j < 64 && 64 * u + j < m.cols; ++j) {
      const int v = m.four_bit ? (j < 32 ? p[j] & 0x0F : p[j - 32] >> 4) : p[j];
      dst[64 * u + j] = m.biased ? scale[j / m.group] * static_cast<float>(v - 128)
                                 : scale[j / m.group] * static_cast<float>(v) + offset[j / m.group];
    }
  }
}

}  // namespace optimate::cpu
