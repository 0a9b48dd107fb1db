#include "backend/cpu/cpu_isa.h"

#include <cpuid.h>

#include <cstdint>

#include "core/error.h"

namespace optimate::cpu {
namespace {

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
             f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;           // SSE and AVX state
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;         // plus opmask and both zmm halves
  const bool tile_state = (xcr0 & (3u << 17)) == (3u << 17);
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5), avx512f = b & (1u << 16), avx512bw = b & (1u << 30),
             avx512vl = b & (1u << 31), vnni = c & (1u << 11), amx_tile = d & (1u << 24),
             amx_int8 = d & (1u << 25);
  f.avx2 = ymm_state && avx2 && fma && f16c;
  f.avx512_vnni = f.avx2 && zmm_state && avx512f && avx512bw && avx512vl && vnni;
  f.amx_int8 = tile_state && amx_tile && amx_int8;
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool cpu_supports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx2: return cpu_features().avx2;
    case CpuIsa::kAvx512Vnni: return cpu_features().avx512_vnni;
  }
  return false;
}

CpuIsa best_cpu_isa() { return cpu_supports(CpuIsa::kAvx512Vnni) ? CpuIsa::kAvx512Vnni : CpuIsa::kAvx2; }

std::vector<CpuIsa> supported_cpu_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512Vnni})
    if (cpu_supports(isa)) out.push_back(isa);
  return out;
}

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512Vnni: return "avx512-vnni";
  }
  return "?";
}

CpuIsa parse_cpu_isa(std::string_view name) {
  CpuIsa isa;
  if (name == "auto") return best_cpu_isa();
  if (name == "avx2") isa = CpuIsa::kAvx2;
  else if (name == "avx512-vnni") isa = CpuIsa::kAvx512Vnni;
  else fail(ErrorCode::kInvalidArgument, "CPU instruction set '{}': expected auto, avx2 or avx512-vnni", name);
  if (!cpu_supports(isa))
    fail(ErrorCode::kUnsupported, "this processor cannot run the {} kernels ({})", name, describe_cpu_features());
  return isa;
}

void check_cpu_floor() {
  if (!cpu_features().avx2)
    fail(ErrorCode::kUnsupported,
         "the CPU backend needs AVX2, FMA and F16C (x86-64-v3), which this processor or OS lacks");
}

std::string describe_cpu_features() {
  const CpuFeatures& f = cpu_features();
  std::string s = f.avx2 ? "avx2" : "no avx2";
  if (f.avx512_vnni) s += " avx512-vnni";
  if (f.amx_int8) s += " (amx-int8 present, unused)";
  return s;
}

}  // namespace optimate::cpu
