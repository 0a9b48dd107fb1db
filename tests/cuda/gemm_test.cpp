// Linear layers (bf16 in, fp32 accumulate) against a CPU twin: cuBLASLt and the small-m
// kernel, with and without bias, bf16 and fp32 outputs, k on and off the unrolled grid.
#include "backend/cuda/gemm.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;

TEST(Gemm, LinearMatchesCpuTwin) {
  OPTIMATE_REQUIRE_GPU();
  Gemm gemm;
  struct Case { int64_t m, n, k; bool bias; GemmOutput out; };
  for (const Case& cs : {Case{1, 384, 576, false, GemmOutput::kBf16}, Case{37, 1000, 256, true, GemmOutput::kBf16},
                         Case{64, 257, 128, false, GemmOutput::kF32}, Case{3, 6144, 4096, false, GemmOutput::kF32},
                         Case{8, 1000, 14336, true, GemmOutput::kBf16}, Case{5, 130, 1032, true, GemmOutput::kF32}}) {
    const Bf16Data x = random_bf16(cs.m * cs.k, 41);
    const Bf16Data w = random_bf16(cs.n * cs.k, 42, -0.05f, 0.05f);
    const Bf16Data b = random_bf16(cs.n, 43);
    auto d_x = upload(x.bits);
    auto d_w = upload(w.bits);
    auto d_b = upload(b.bits);
    std::vector<float> ref(cs.m * cs.n);
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < cs.n; ++j) {
        double acc = cs.bias ? b.values[j] : 0.0;
        for (int64_t kk = 0; kk < cs.k; ++kk) acc += double(x.values[i * cs.k + kk]) * w.values[j * cs.k + kk];
        ref[i * cs.n + j] = float(acc);
      }
    const std::string what = "gemm m " + std::to_string(cs.m) + " n " + std::to_string(cs.n) + " k " + std::to_string(cs.k);
    if (cs.out == GemmOutput::kBf16) {
      DeviceBuffer<uint16_t> d_y(cs.m * cs.n);
      gemm.linear(bf16_ptr(d_x), bf16_ptr(d_w), cs.bias ? bf16_ptr(d_b) : nullptr, d_y.get(), cs.out, cs.m, cs.n, cs.k, nullptr);
      expect_close(download_bf16(d_y.get(), cs.m * cs.n), ref, 1e-2f, 1e-2f, what);
    } else {
      DeviceBuffer<float> d_y(cs.m * cs.n);
      gemm.linear(bf16_ptr(d_x), bf16_ptr(d_w), cs.bias ? bf16_ptr(d_b) : nullptr, d_y.get(), cs.out, cs.m, cs.n, cs.k, nullptr);
      expect_close(download(d_y.get(), cs.m * cs.n), ref, 1e-3f, 1e-3f, what);
    }
    // Small m runs on the bandwidth-bound kernel by default; cuBLASLt must agree too.
    // (cuBLASLt's bias epilogue takes a bias of the output type, so the fp32 cases run it
    // without bias; the runner only adds biases to bf16 outputs.)
    if (cs.m <= 8 && !(cs.bias && cs.out == GemmOutput::kF32)) {
      gemm.set_small_m_kernel(false);
      DeviceBuffer<uint16_t> d_y(cs.m * cs.n);
      gemm.linear(bf16_ptr(d_x), bf16_ptr(d_w), cs.bias ? bf16_ptr(d_b) : nullptr, d_y.get(), GemmOutput::kBf16, cs.m, cs.n, cs.k, nullptr);
      expect_close(download_bf16(d_y.get(), cs.m * cs.n), ref, 1e-2f, 1e-2f, what + " (cuBLASLt)");
      gemm.set_small_m_kernel(true);
    }
  }
}

}  // namespace
}  // namespace optimate::cuda
