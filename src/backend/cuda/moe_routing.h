// Mixture-of-experts routing and combine on the GPU, the device twins of model/moe_routing.h:
//   moe_route    softmax over the router logits, top-k, renormalization: one warp per token
//   moe_align    the (token, slot) pairs grouped by expert (the grouped GEMM's row order) and
//                the list of row tiles of at most tile_rows rows, each inside one expert's run,
//                in one block, so the grouped GEMMs' grids can be sized from the token count
//                alone (CUDA graphs) while only the tiles that exist do work
//   moe_combine  each token's weighted sum of its experts' outputs (ascending expert order, fp32),
//                stored, added to the residual stream, or kept in fp32 for a tensor-parallel sum
// Layouts: logits [T, E] fp32; ids [T, k] int32, weights [T, k] fp32; pairs, row_of [T * k]
// int32 (a pair is token * k + slot; pairs[row] names the pair at grouped row `row`, row_of the
// inverse); tiles [max tiles] MoeTile and num_tiles [1] int32; expert_out [T * k, hidden] bf16 in
// grouped row order.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace optimate::cuda {

// Rows [begin, end) of the grouped order, all routed to `expert`.
struct MoeTile {
  int32_t expert;
  int32_t begin;
  int32_t end;
  int32_t pad;
};

// Largest top-k and expert count the kernels take.
inline constexpr int64_t kMoeMaxTopK = 32;
inline constexpr int64_t kMoeMaxExperts = 1024;

// Tiles moe_align may list for `num_pairs` pairs over `num_experts` experts in tiles of
// `tile_rows`: every expert's run ends in at most one partial tile.
int64_t moe_max_tiles(int64_t num_pairs, int64_t num_experts, int64_t tile_rows);

// ids/weights [T, k] from logits [T, E]: descending probability, exact ties to the lower index,
// weights divided by their sum when `renormalize`.
void moe_route(const float* logits, int32_t* ids, float* weights, int64_t num_tokens, int64_t num_experts,
               int64_t top_k, bool renormalize, cudaStream_t stream);

// Groups the T * k pairs of `ids` by expert: pairs/row_of as above (the order of a token's pairs
// inside its expert's run is not fixed; no result depends on it), tiles of at most tile_rows
// rows and their count.
void moe_align(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t tile_rows,
               int32_t* pairs, int32_t* row_of, MoeTile* tiles, int32_t* num_tiles, cudaStream_t stream);

enum class MoeCombineOutput {
  kBf16,         // out_bf16 [T, hidden] = bf16(sum)
  kAddResidual,  // residual [T, hidden] fp32 += bf16(sum): what rmsnorm_residual's add would do
  kF32,          // out_f32 [T, hidden] = sum (a rank's part, all-reduced next)
};

struct MoeCombineParams {
  const __nv_bfloat16* expert_out = nullptr;  // [T * k, hidden], grouped rows
  const int32_t* ids = nullptr;               // [T, k]
  const float* weights = nullptr;             // [T, k]
  const int32_t* row_of = nullptr;            // [T * k]
  int64_t num_tokens = 0, top_k = 0, hidden = 0;
  MoeCombineOutput output = MoeCombineOutput::kBf16;
  __nv_bfloat16* out_bf16 = nullptr;
  float* residual = nullptr;
  float* out_f32 = nullptr;
};

// Needs hidden % 8 == 0.
void moe_combine(const MoeCombineParams& p, cudaStream_t stream);

}  // namespace optimate::cuda
