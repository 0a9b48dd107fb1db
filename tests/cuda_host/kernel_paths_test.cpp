// The kernel path each GPU gets from its compute capability, the kernels that follow from it
// (decode attention for few rows, prefill key tiles), and the errors at start for what a GPU
// lacks. The GPUs are described as their CUDA runtime reports them (cudaGetDeviceProperties:
// compute capability, SMs, memory, shared memory a block may opt into); no GPU is needed.
#include "backend/cuda/kernel_paths.h"

#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/paged_attention.h"
#include "backend/cuda/prefill_attention.h"
#include "core/error.h"

namespace optimate::cuda {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

GpuDescription gpu(const char* name, int major, int minor, int sms, int64_t mib, int64_t smem_kb) {
  GpuDescription g;
  g.name = name;
  g.cc = {major, minor};
  g.num_sms = sms;
  g.total_bytes = mib * kMiB;
  g.smem_block_optin_bytes = smem_kb * 1024;
  g.smem_sm_bytes = (smem_kb + 1) * 1024;
  g.smem_block_reserved_bytes = 1024;
  return g;
}

const GpuDescription kA100 = gpu("NVIDIA A100-SXM4-80GB", 8, 0, 108, 81920, 163);
const GpuDescription kA10 = gpu("NVIDIA A10", 8, 6, 72, 23028, 99);
const GpuDescription kL40S = gpu("NVIDIA L40S", 8, 9, 142, 46068, 99);
const GpuDescription kH200 = gpu("NVIDIA H200", 9, 0, 132, 143771, 227);
const GpuDescription kB200 = gpu("NVIDIA B200", 10, 0, 148, 182272, 227);
const GpuDescription kT4 = gpu("Tesla T4", 7, 5, 40, 15360, 64);

using K = DecodeAttentionKernel;

// What a batch-1 decode step runs for Llama-3-8B's attention (32 heads over 8 KV heads).
K batch1_decode_kernel(const KernelPaths& p) {
  return resolve_decode_kernel_for_rows(K::kAuto, 1, 32, 8, 16, p.gpu.num_sms, p.head_clusters);
}

TEST(KernelPaths, AmpereAndAdaRunThePortableKernels) {
  for (const GpuDescription& g : {kA100, kA10, kL40S}) {
    const KernelPaths p = choose_kernel_paths(g, KernelPathRequest::kAuto);
    EXPECT_EQ(p.path, KernelPath::kPortable) << g.name;
    EXPECT_FALSE(p.head_clusters) << g.name;
    EXPECT_FALSE(p.programmatic_launch) << g.name;
    EXPECT_FALSE(p.forced) << g.name;
    EXPECT_EQ(batch1_decode_kernel(p), K::kTensorCores) << g.name;
    EXPECT_NE(p.describe().find("portable kernels"), std::string::npos) << p.describe();
  }
}

TEST(KernelPaths, HopperAndLaterRunTheClusterKernels) {
  for (const GpuDescription& g : {kH200, kB200}) {
    const KernelPaths p = choose_kernel_paths(g, KernelPathRequest::kAuto);
    EXPECT_EQ(p.path, KernelPath::kHopper) << g.name;
    EXPECT_TRUE(p.head_clusters && p.programmatic_launch) << g.name;
    EXPECT_EQ(batch1_decode_kernel(p), K::kHeadClusters) << g.name;
    EXPECT_EQ(p.variant_smem_bytes, g.smem_block_optin_bytes) << g.name;
    EXPECT_NE(p.describe().find("Hopper kernels"), std::string::npos) << p.describe();
  }
}

TEST(KernelPaths, Fp8FromAdaOn) {
  EXPECT_FALSE(choose_kernel_paths(kA100, KernelPathRequest::kAuto).fp8);
  EXPECT_FALSE(choose_kernel_paths(kA10, KernelPathRequest::kAuto).fp8);
  EXPECT_TRUE(choose_kernel_paths(kL40S, KernelPathRequest::kAuto).fp8);
  EXPECT_TRUE(choose_kernel_paths(kH200, KernelPathRequest::kAuto).fp8);
  EXPECT_NE(choose_kernel_paths(kA10, KernelPathRequest::kAuto).describe().find("no FP8"), std::string::npos);
}

// Forced on an H200: the Ada kernels, sized for Ada's shared memory; FP8 stays (the GPU has it).
TEST(KernelPaths, ForcedPortableOnHopperRunsWhatAdaRuns) {
  const KernelPaths forced = choose_kernel_paths(kH200, KernelPathRequest::kPortable);
  const KernelPaths ada = choose_kernel_paths(kL40S, KernelPathRequest::kAuto);
  EXPECT_EQ(forced.path, KernelPath::kPortable);
  EXPECT_TRUE(forced.forced);
  EXPECT_FALSE(forced.head_clusters || forced.programmatic_launch);
  EXPECT_TRUE(forced.fp8);
  EXPECT_EQ(forced.variant_smem_bytes, ada.variant_smem_bytes);
  EXPECT_EQ(batch1_decode_kernel(forced), batch1_decode_kernel(ada));
  for (bool quantized : {false, true})
    EXPECT_EQ(prefill_attention_key_tile(128, quantized, forced.variant_smem_bytes),
              prefill_attention_key_tile(128, quantized, ada.variant_smem_bytes));
  EXPECT_NE(forced.describe().find("OPTIMATE_CUDA_KERNELS=portable"), std::string::npos) << forced.describe();
}

// Prefill at head_dim 128 takes 102 KB in key tiles of 64: an A100 or H200 block holds it; the
// 99 KB of an A10 or L40S take tiles of 32. Head_dim 64 fits everywhere in tiles of 64.
TEST(KernelPaths, PrefillKeyTilesFitTheBlocksSharedMemory) {
  EXPECT_EQ(prefill_attention_smem_bytes(128, false, 64), 104448);
  for (bool quantized : {false, true}) {
    EXPECT_EQ(prefill_attention_key_tile(128, quantized, kA100.smem_block_optin_bytes), 64);
    EXPECT_EQ(prefill_attention_key_tile(128, quantized, kH200.smem_block_optin_bytes), 64);
    EXPECT_EQ(prefill_attention_key_tile(128, quantized, kA10.smem_block_optin_bytes), 32);
    EXPECT_EQ(prefill_attention_key_tile(128, quantized, kL40S.smem_block_optin_bytes), 32);
    EXPECT_EQ(prefill_attention_key_tile(64, quantized, kA10.smem_block_optin_bytes), 64);
    EXPECT_LE(prefill_attention_smem_bytes(128, quantized, 32), kPortableSmemBlockBytes);
  }
  EXPECT_EQ(prefill_attention_key_tile(128, false, 48 * 1024), 0);
}

TEST(KernelPaths, OlderThanAmpereIsRefusedNamingTheGpuAndTheWayOut) {
  try {
    choose_kernel_paths(kT4, KernelPathRequest::kAuto);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(m.find("Tesla T4, compute capability 7.5"), std::string::npos) << m;
    EXPECT_NE(m.find("8.0 or newer"), std::string::npos) << m;
    EXPECT_NE(m.find("--device cpu"), std::string::npos) << m;
  }
}

TEST(KernelPaths, TheSwitchTakesAutoOrPortable) {
  EXPECT_EQ(parse_kernel_path_request(""), KernelPathRequest::kAuto);
  EXPECT_EQ(parse_kernel_path_request("auto"), KernelPathRequest::kAuto);
  EXPECT_EQ(parse_kernel_path_request("portable"), KernelPathRequest::kPortable);
  try {
    parse_kernel_path_request("hopper");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("OPTIMATE_CUDA_KERNELS=hopper"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("auto"), std::string::npos) << e.what();
  }
}

std::string feature_error(const GpuDescription& g, WeightQuantization q, kv::KvPrecision cache,
                          std::optional<kv::KvPrecision> finest) {
  try {
    check_gpu_features(choose_kernel_paths(g, KernelPathRequest::kAuto), q, cache, finest);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    return e.what();
  }
  return "";
}

// FP8 weights and fp8 KV blocks on an Ampere GPU: refused at start, naming the setting, the GPU
// and what to use instead.
TEST(KernelPaths, Fp8OnAmpereFailsAtStartNamingTheAlternatives) {
  using P = kv::KvPrecision;
  const std::string weights = feature_error(kA10, WeightQuantization::kFp8, P::kBF16, std::nullopt);
  EXPECT_NE(weights.find("--quantization fp8"), std::string::npos) << weights;
  EXPECT_NE(weights.find("NVIDIA A10, compute capability 8.6"), std::string::npos) << weights;
  EXPECT_NE(weights.find("8.9 or newer"), std::string::npos) << weights;
  EXPECT_NE(weights.find("--quantization none"), std::string::npos) << weights;

  const std::string cache = feature_error(kA100, WeightQuantization::kNone, P::kFP8, std::nullopt);
  EXPECT_NE(cache.find("--kv-cache-dtype fp8"), std::string::npos) << cache;
  EXPECT_NE(cache.find("--kv-cache-dtype int8"), std::string::npos) << cache;

  const std::string kv_quant = feature_error(kA100, WeightQuantization::kNone, P::kBF16, P::kFP8);
  EXPECT_NE(kv_quant.find("kv_quant"), std::string::npos) << kv_quant;
  EXPECT_NE(kv_quant.find("bits to 8"), std::string::npos) << kv_quant;

  // What Ampere does run, and FP8 where the GPU has it.
  EXPECT_EQ(feature_error(kA100, WeightQuantization::kNone, P::kInt8, P::kInt4), "");
  EXPECT_EQ(feature_error(kA10, WeightQuantization::kNone, P::kBF16, P::kInt8), "");
  EXPECT_EQ(feature_error(kL40S, WeightQuantization::kFp8, P::kFP8, std::nullopt), "");
  EXPECT_EQ(feature_error(kH200, WeightQuantization::kFp8, P::kBF16, P::kFP8), "");
}

}  // namespace
}  // namespace optimate::cuda
