// FP8 weights on the GPU against the host twin (model/fp8_quant.h): row quantization bit for
// bit, the weights quantized at load (codes, scales, and the bf16 tensors kept beside them),
// and FP8 linear layers on every path (the GEMV up to 8 rows; cuBLASLt with outer-vector
// scales; cuBLASLt into fp32 with the scale epilogue) for m = 1 to 2048, odd n, bias, bf16 and
// fp32 outputs. Each linear case prints which cuBLASLt path ran.
#include <cstdio>

#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/fp8_quantize.h"
#include "backend/cuda/fp8_weights.h"
#include "backend/cuda/gemv.h"
#include "model/fp8_quant.h"
#include "small_models.h"
#include "test_util.h"

namespace optimate::cuda {
namespace {

using namespace testing;

TEST(Fp8, RowQuantizationMatchesTheHostTwinBitForBit) {
  OPTIMATE_REQUIRE_GPU();
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{5, 8}, {7, 4104}, {3, 576}}) {
    Bf16Data x = random_bf16(rows * cols, 11, -3.0f, 3.0f);
    // Row 1 all zeros (scale 0), row 2 huge, the last tiny (codes in the subnormal range).
    for (int64_t j = 0; j < cols; ++j) {
      x.bits[cols + j] = f32_to_bf16(0.0f);
      x.bits[2 * cols + j] = f32_to_bf16(x.values[2 * cols + j] * 1000.0f);
      x.bits[(rows - 1) * cols + j] = f32_to_bf16(j == 0 ? 1.0f : x.values[(rows - 1) * cols + j] * 1e-4f);
    }
    for (size_t i = 0; i < x.bits.size(); ++i) x.values[i] = bf16_to_f32(x.bits[i]);
    auto d_x = upload(x.bits);
    DeviceBuffer<uint8_t> d_codes(rows * cols);
    DeviceBuffer<float> d_scales(rows);
    quantize_fp8_rows(bf16_ptr(d_x), rows, cols, reinterpret_cast<__nv_fp8_e4m3*>(d_codes.get()), d_scales.get(),
                      nullptr);
    const std::vector<uint8_t> codes = download(d_codes.get(), rows * cols);
    const std::vector<float> scales = download(d_scales.get(), rows);
    const Fp8Matrix ref = quantize_fp8_matrix(x.values.data(), rows, cols);
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(scales[r], ref.scales[r]) << rows << "x" << cols << " row " << r;
      for (int64_t j = 0; j < cols; ++j)
        if (codes[r * cols + j] != ref.codes[r * cols + j] && bad++ < 8)
          ADD_FAILURE() << rows << "x" << cols << " row " << r << " col " << j << ": code " << int(codes[r * cols + j])
                        << ", host " << int(ref.codes[r * cols + j]) << " (x " << x.values[r * cols + j] << ")";
    }
    EXPECT_EQ(bad, 0) << rows << "x" << cols;
  }
}

TEST(Fp8, WeightsQuantizedAtLoadEqualTheHostTwinAndKeepTheirBf16Neighbours) {
  OPTIMATE_REQUIRE_GPU();
  const ModelConfig c = small_config(false);  // q/k/v bias and tied embeddings: relocated tensors
  const LoadedModel host = make_dummy_model(c, 5);
  const CudaWeights w = quantize_weights_fp8(make_dummy_weights(c, 5));
  ASSERT_TRUE(w.fp8());
  EXPECT_EQ(static_cast<int64_t>(w.bytes()), cuda_fp8_weight_bytes(c));
  EXPECT_LT(w.bytes(), static_cast<size_t>(cuda_weight_bytes(c)));
  const int64_t H = c.hidden_size, q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  auto values = [](std::initializer_list<const HostTensor*> parts) {
    std::vector<float> v;
    for (const HostTensor* t : parts) {
      const std::vector<float> f = to_f32(*t);
      v.insert(v.end(), f.begin(), f.end());
    }
    return v;
  };
  const LayerWeights& l1 = host.weights.layers[1];
  const CudaLayerWeights& g1 = w.layers[1];
  struct Case { const char* name; Fp8Weight fp8; std::vector<float> ref; int64_t rows, cols; };
  const Case cases[] = {
      {"wqkv", g1.wqkv_fp8, values({&l1.wq, &l1.wk, &l1.wv}), q_dim + 2 * kv_dim, H},
      {"wo", g1.wo_fp8, values({&l1.wo}), H, q_dim},
      {"w_gate_up", g1.w_gate_up_fp8, values({&l1.w_gate, &l1.w_up}), 2 * c.intermediate_size, H},
      {"w_down", g1.w_down_fp8, values({&l1.w_down}), H, c.intermediate_size}};
  for (const Case& cs : cases) {
    const Fp8Matrix ref = quantize_fp8_matrix(cs.ref.data(), cs.rows, cs.cols);
    EXPECT_EQ(download(reinterpret_cast<const uint8_t*>(cs.fp8.codes), cs.rows * cs.cols), ref.codes) << cs.name;
    EXPECT_EQ(download(cs.fp8.scales, cs.rows), ref.scales) << cs.name;
  }
  EXPECT_EQ(g1.wqkv, nullptr);
  auto bf16_values = [](const __nv_bfloat16* p, int64_t n) {
    return download_bf16(reinterpret_cast<const uint16_t*>(p), n);
  };
  EXPECT_EQ(bf16_values(g1.attn_norm, H), to_f32(l1.attn_norm));
  EXPECT_EQ(bf16_values(g1.ffn_norm, H), to_f32(l1.ffn_norm));
  EXPECT_EQ(bf16_values(g1.bqkv, q_dim + 2 * kv_dim), values({&*l1.bq, &*l1.bk, &*l1.bv}));
  EXPECT_EQ(bf16_values(w.final_norm, H), to_f32(host.weights.final_norm));
  EXPECT_EQ(bf16_values(w.lm_head, c.vocab_size * H), to_f32(host.weights.tok_embeddings));
}

TEST(Fp8, LinearMatchesTheHostTwinOnEveryPath) {
  OPTIMATE_REQUIRE_GPU();
  struct Case { int64_t m, n, k; bool bias; GemmOutput out; };
  const Case cases[] = {
      {1, 384, 576, false, GemmOutput::kBf16},   {1, 1001, 1024, true, GemmOutput::kF32},
      {2, 2048, 4096, false, GemmOutput::kBf16}, {7, 1001, 1024, true, GemmOutput::kBf16},
      {8, 6144, 4096, false, GemmOutput::kF32},  {9, 257, 128, false, GemmOutput::kF32},
      {64, 257, 128, true, GemmOutput::kBf16},   {64, 4096, 4096, false, GemmOutput::kBf16},
      {300, 1024, 576, true, GemmOutput::kF32},  {2048, 1536, 576, true, GemmOutput::kBf16},
      {2048, 1001, 1024, false, GemmOutput::kF32}};
  Fp8Gemm gemm(2048, 4096);
  for (const Case& cs : cases) {
    const Bf16Data x = random_bf16(cs.m * cs.k, 41);
    const Bf16Data w = random_bf16(cs.n * cs.k, 42, -0.05f, 0.05f);
    const Bf16Data b = random_bf16(cs.n, 43);
    const Fp8Matrix q = quantize_fp8_matrix(w.values.data(), cs.n, cs.k);
    auto d_x = upload(x.bits);
    auto d_codes = upload(q.codes);
    auto d_scales = upload(q.scales);
    auto d_b = upload(b.bits);
    std::vector<float> ref(cs.m * cs.n);
    fp8_linear_reference(x.values.data(), cs.m, q, ref.data());
    if (cs.bias)
      for (int64_t i = 0; i < cs.m; ++i)
        for (int64_t j = 0; j < cs.n; ++j) ref[i * cs.n + j] += b.values[j];
    const Fp8Weight fw{reinterpret_cast<const __nv_fp8_e4m3*>(d_codes.get()), d_scales.get()};
    const bool wide = fp8_rounds_activations(cs.m, cs.n);
    for (Fp8GemmPath path : wide ? std::vector<Fp8GemmPath>{Fp8GemmPath::kAuto, Fp8GemmPath::kScaleEpilogue}
                                 : std::vector<Fp8GemmPath>{Fp8GemmPath::kAuto}) {
      gemm.set_path(path);
      const bool f32 = cs.out == GemmOutput::kF32;
      DeviceBuffer<uint8_t> d_y(cs.m * cs.n * (f32 ? 4 : 2));
      gemm.linear(bf16_ptr(d_x), fw, cs.bias ? bf16_ptr(d_b) : nullptr, d_y.get(), cs.out, cs.m, cs.n, cs.k, nullptr);
      const char* ran = !wide ? "FP8 GEMV" : gemm.last_used_outer_scales() ? "cuBLASLt, outer-vector scales"
                                                                            : "cuBLASLt into fp32, scale epilogue";
      std::printf("fp8 linear m %lld n %lld k %lld%s %s: %s\n", static_cast<long long>(cs.m),
                  static_cast<long long>(cs.n), static_cast<long long>(cs.k), cs.bias ? " +bias" : "",
                  f32 ? "fp32" : "bf16", ran);
      const std::string what = std::string("fp8 linear m ") + std::to_string(cs.m) + " n " + std::to_string(cs.n) +
                                " k " + std::to_string(cs.k) + " (" + ran + ")";
      if (f32)
        expect_close(download(reinterpret_cast<const float*>(d_y.get()), cs.m * cs.n), ref, 2e-3f, 2e-3f, what);
      else
        expect_close(download_bf16(reinterpret_cast<const uint16_t*>(d_y.get()), cs.m * cs.n), ref, 1e-2f, 1e-2f,
                     what);
    }
  }
  gemm.set_path(Fp8GemmPath::kAuto);
}

// Each GEMV kernel on FP8 codes at every row count it takes, against the host twin: the
// Llama-3-8B attention width, odd widths and k off every kernel's load grid, the kernel's own
// split of k and forced ones, bf16 and fp32 outputs (the fused inputs and epilogues over FP8
// codes: fused_gemv_test.cpp).
TEST(Fp8, GemvKernelsMatchTheHostTwin) {
  OPTIMATE_REQUIRE_GPU();
  struct Case { int64_t n, k; bool bias; GemmOutput out; };
  const Case cases[] = {{4096, 4096, false, GemmOutput::kBf16},
                        {1001, 1040, true, GemmOutput::kF32},
                        {130, 14336, false, GemmOutput::kF32},
                        {7, 16, true, GemmOutput::kF32}};
  for (const Case& cs : cases) {
    const Bf16Data x = random_bf16(kFp8GemvMaxRows * cs.k, 51);
    const Bf16Data w = random_bf16(cs.n * cs.k, 52, -0.05f, 0.05f);
    const Bf16Data b = random_bf16(cs.n, 53);
    const Fp8Matrix q = quantize_fp8_matrix(w.values.data(), cs.n, cs.k);
    std::vector<float> ref(kFp8GemvMaxRows * cs.n);
    fp8_linear_reference(x.values.data(), kFp8GemvMaxRows, q, ref.data());  // rows independent up to 8
    if (cs.bias)
      for (int64_t i = 0; i < kFp8GemvMaxRows; ++i)
        for (int64_t j = 0; j < cs.n; ++j) ref[i * cs.n + j] += b.values[j];
    auto d_x = upload(x.bits);
    auto d_codes = upload(q.codes);
    auto d_scales = upload(q.scales);
    auto d_b = upload(b.bits);
    const bool f32 = cs.out == GemmOutput::kF32;
    for (GemvKernel kernel : {GemvKernel::kPairs, GemvKernel::kMma, GemvKernel::kMmaDeep})
      for (int split : {0, 1, 8})
        for (int64_t m = 1; m <= kFp8GemvMaxRows; ++m) {
          DeviceBuffer<uint8_t> d_y(m * cs.n * (f32 ? 4 : 2));
          OPTIMATE_CUDA_CHECK(cudaMemset(d_y.get(), 0xff, d_y.bytes()));  // NaN poison
          GemvParams p;
          p.kernel = kernel;
          p.split_k = split;
          p.m = m;
          p.n = cs.n;
          p.k = cs.k;
          p.x = bf16_ptr(d_x);
          p.w_fp8 = reinterpret_cast<const __nv_fp8_e4m3*>(d_codes.get());
          p.w_scale = d_scales.get();
          p.bias = cs.bias ? bf16_ptr(d_b) : nullptr;
          p.y = d_y.get();
          p.epilogue = f32 ? GemvEpilogue::kStoreF32 : GemvEpilogue::kStoreBf16;
          gemv(p, nullptr);
          const std::vector<float> want(ref.begin(), ref.begin() + m * cs.n);
          const std::string what = std::string("fp8 gemv ") + gemv_kernel_name(kernel) + " split " +
                                   std::to_string(split) + " m " + std::to_string(m) + " n " + std::to_string(cs.n) +
                                   " k " + std::to_string(cs.k);
          if (f32)
            expect_close(download(reinterpret_cast<const float*>(d_y.get()), m * cs.n), want, 2e-3f, 2e-3f, what);
          else
            expect_close(download_bf16(reinterpret_cast<const uint16_t*>(d_y.get()), m * cs.n), want, 1e-2f, 1e-2f,
                         what);
        }
  }
}

}  // namespace
}  // namespace optimate::cuda
