// The instruction sets the CPU backend's integer kernels are built for, and which one this
// processor runs. Every variant is compiled into the same binary with function-level target
// attributes; cpuid (and the OS's saved-state mask, xgetbv) decide at run time, so a binary
// built on a machine with AVX-512 still runs where only AVX2 exists.
//
// The backend's floor is x86-64-v3 (AVX2, FMA, F16C): its fp32 code is compiled for it.
// AMX tiles are detected and reported but have no kernel (see docs/architecture.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace optimate::cpu {

enum class CpuIsa {
  kAvx2,        // 256-bit: vpmaddubsw + vpmaddwd (u8 x s8 -> s32)
  kAvx512Vnni,  // 512-bit: vpdpbusd (u8 x s8 accumulated into s32 in one instruction)
};

struct CpuFeatures {
  bool avx2 = false;         // with FMA and F16C: the backend's floor
  bool avx512_vnni = false;  // AVX-512 F/BW/VL/VNNI with the OS saving zmm state
  bool amx_int8 = false;     // AMX tiles (not used: no kernel)
};

// What this processor and OS support (cpuid leaves 1 and 7, xgetbv).
const CpuFeatures& cpu_features();

// The best variant this processor runs.
CpuIsa best_cpu_isa();
bool cpu_supports(CpuIsa isa);
// Every variant this processor runs, best last (what the kernel tests force in turn).
std::vector<CpuIsa> supported_cpu_isas();

std::string_view cpu_isa_name(CpuIsa isa);
// "avx2", "avx512-vnni", or "auto" (the best supported). Error(kInvalidArgument) otherwise, and
// Error(kUnsupported) for a variant this processor cannot run.
CpuIsa parse_cpu_isa(std::string_view name);

// Throws Error(kUnsupported) naming the missing features when the processor is below the floor.
void check_cpu_floor();

// "avx2 avx512-vnni (amx-int8 present, unused)": for the startup log.
std::string describe_cpu_features();

}  // namespace optimate::cpu
