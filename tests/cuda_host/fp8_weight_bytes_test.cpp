// What --quantization fp8 frees on the GPU, so the memory plan gives the KV cache more: the
// Llama-3-8B shape's linear projections (6.98 G parameters) at one byte each plus a scale per
// row, its embedding and LM head (2 x 0.53 G) and norms still bf16.
#include <gtest/gtest.h>

#include "backend/cuda/cuda_weights.h"
#include "backend/cuda/fp8_weights.h"
#include "model/weights.h"

namespace optimate::cuda {
namespace {

TEST(Fp8WeightBytes, Llama3EightBShrinksByTheLinearLayersHalf) {
  const ModelConfig c = load_model_header(std::string(OPTIMATE_TEST_DATA_DIR) + "/../../configs/models/llama-3-8b").config;
  const int64_t linear = c.num_layers * ((c.num_heads + 2 * c.num_kv_heads) * c.head_dim * c.hidden_size +
                                         c.hidden_size * c.num_heads * c.head_dim +
                                         3 * c.intermediate_size * c.hidden_size);
  EXPECT_EQ(linear, int64_t{6979321856});
  const int64_t bf16 = cuda_weight_bytes(c), fp8 = cuda_fp8_weight_bytes(c);
  // The linear layers' bytes halve (bf16 to e4m3); alignment padding and scales are the rest.
  EXPECT_NEAR(static_cast<double>(bf16 - fp8), static_cast<double>(linear), 8e6);
  EXPECT_GT(fp8, linear + 2 * c.vocab_size * c.hidden_size * 2);
}

}  // namespace
}  // namespace optimate::cuda
