// The engine settings whose value is one of a few names (config/engine_settings.def, kind
// kChoice), each with its one table of names (core/choices.h). They live on the ground floor
// because the modules that act on them (model loading, the KV cache, the backends, the
// preemption policy) sit below the settings.
#pragma once

#include "core/choices.h"

namespace optimate {

// --device: which backend serves.
enum class Device { kAuto, kCpu, kCuda };
template <>
struct Choices<Device> {
  static constexpr ChoiceName<Device> names[] = {{Device::kAuto, "auto"}, {Device::kCpu, "cpu"}, {Device::kCuda, "cuda"}};
};

// --load-format: how the model file is read; dummy gives seeded random weights of its shape.
enum class LoadFormat { kAuto, kGguf, kSafetensors, kDummy };
template <>
struct Choices<LoadFormat> {
  static constexpr ChoiceName<LoadFormat> names[] = {{LoadFormat::kAuto, "auto"},
                                                     {LoadFormat::kGguf, "gguf"},
                                                     {LoadFormat::kSafetensors, "safetensors"},
                                                     {LoadFormat::kDummy, "dummy"}};
};

// --kv-cache-dtype: the precision of every KV block (kv::KvPrecision), or the model's (auto).
// vLLM's names and ours.
enum class KvCacheDtype { kAuto, kF32, kBF16, kFP8, kInt8, kInt4 };
template <>
struct Choices<KvCacheDtype> {
  static constexpr ChoiceName<KvCacheDtype> names[] = {
      {KvCacheDtype::kAuto, "auto"}, {KvCacheDtype::kF32, "f32"},  {KvCacheDtype::kF32, "float32"},
      {KvCacheDtype::kBF16, "bf16"}, {KvCacheDtype::kBF16, "bfloat16"}, {KvCacheDtype::kFP8, "fp8"},
      {KvCacheDtype::kFP8, "fp8_e4m3"}, {KvCacheDtype::kInt8, "int8"}, {KvCacheDtype::kInt4, "int4"}};
};

// --quantization: the linear projections' weights as loaded, or FP8 (e4m3, model/fp8_quant.h).
enum class WeightQuantization { kNone, kFp8 };
template <>
struct Choices<WeightQuantization> {
  static constexpr ChoiceName<WeightQuantization> names[] = {{WeightQuantization::kNone, "none"},
                                                             {WeightQuantization::kFp8, "fp8"}};
};

// --preemption-mode: what a preempted request does with its KV (optim/preempt_mode_policy.h).
enum class PreemptionMode { kAuto, kRecompute, kSwap };
template <>
struct Choices<PreemptionMode> {
  static constexpr ChoiceName<PreemptionMode> names[] = {
      {PreemptionMode::kAuto, "auto"}, {PreemptionMode::kRecompute, "recompute"}, {PreemptionMode::kSwap, "swap"}};
};

// --cpu-activations: how the CPU backend's quantized weights meet the activations.
enum class CpuActivations {
  kQ8,   // activations quantized to 8 bits once per product, integer dot products (q8_linear.h)
  kF32,  // the reference: weights widened block by block, fp32 products (cpu_ops.h linear)
};
template <>
struct Choices<CpuActivations> {
  static constexpr ChoiceName<CpuActivations> names[] = {{CpuActivations::kQ8, "q8"}, {CpuActivations::kF32, "f32"}};
};

}  // namespace optimate
