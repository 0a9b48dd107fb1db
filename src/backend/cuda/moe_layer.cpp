#include "backend/cuda/moe_layer.h"

#include "backend/cuda/moe_gemm.h"
#include "core/error.h"

namespace optimate::cuda {

void check_moe_supported(const ModelConfig& c) {
  if (!c.is_moe()) return;
  const MoeConfig& m = c.moe;
  if (m.num_experts > kMoeMaxExperts || m.num_experts_per_tok > kMoeMaxTopK)
    fail(ErrorCode::kUnsupported, "CUDA backend: {} experts, top-{} (up to {} experts and top-{})", m.num_experts,
         m.num_experts_per_tok, kMoeMaxExperts, kMoeMaxTopK);
  if (m.expert_intermediate_size % 16 != 0 || c.hidden_size % 16 != 0)
    fail(ErrorCode::kUnsupported, "CUDA backend: experts of {} features over a hidden size of {} (both must be "
         "multiples of 16)", m.expert_intermediate_size, c.hidden_size);
}

void MoeBuffers::allocate(const ModelConfig& c, int64_t max_tokens) {
  const int64_t e = c.moe.num_experts, k = c.moe.num_experts_per_tok, pairs_max = max_tokens * k;
  router_logits.resize(static_cast<size_t>(max_tokens * e));
  ids.resize(static_cast<size_t>(pairs_max));
  weights.resize(static_cast<size_t>(pairs_max));
  pairs.resize(static_cast<size_t>(pairs_max));
  row_of.resize(static_cast<size_t>(pairs_max));
  tiles.resize(static_cast<size_t>(moe_max_tiles(pairs_max, e, kMoeSmallTileRows)));
  num_tiles.resize(1);
  act.resize(static_cast<size_t>(pairs_max * c.moe.expert_intermediate_size));
  expert_out.resize(static_cast<size_t>(pairs_max * c.hidden_size));
}

int64_t MoeBuffers::bytes(const ModelConfig& c, int64_t max_tokens) {
  if (!c.is_moe()) return 0;
  const int64_t e = c.moe.num_experts, k = c.moe.num_experts_per_tok, pairs_max = max_tokens * k;
  return max_tokens * e * 4 + pairs_max * 4 * 4 + moe_max_tiles(pairs_max, e, kMoeSmallTileRows) * 16 + 4 +
         pairs_max * (c.moe.expert_intermediate_size + c.hidden_size) * 2;
}

void enqueue_moe(const ModelConfig& c, const CudaLayerWeights& w, const __nv_bfloat16* x, int64_t t, MoeBuffers& b,
                 Gemm& gemm, MoeCombineParams out, cudaStream_t stream) {
  const int64_t e = c.moe.num_experts, k = c.moe.num_experts_per_tok, h = c.hidden_size;
  const int64_t inter = c.moe.expert_intermediate_size, num_pairs = t * k;
  OPTIMATE_CHECK(static_cast<size_t>(num_pairs) <= b.pairs.size(), "{} MoE pairs for buffers of {}", num_pairs,
                 b.pairs.size());
  if (t == 0) return;
  gemm.linear(x, w.router, nullptr, b.router_logits.get(), GemmOutput::kF32, t, e, h, stream);
  moe_route(b.router_logits.get(), b.ids.get(), b.weights.get(), t, e, k, c.moe.norm_topk_prob, stream);
  const int64_t tile_rows = moe_tile_rows(num_pairs, e);
  moe_align(b.ids.get(), t, k, e, tile_rows, b.pairs.get(), b.row_of.get(), b.tiles.get(), b.num_tiles.get(),
            stream);

  MoeGemmParams up;
  up.kind = MoeGemmKind::kSiluGateUp;
  up.a = x;
  up.pairs = b.pairs.get();
  up.top_k = k;
  up.w = w.experts_gate_up;
  up.w_fp8 = w.experts_gate_up_fp8.codes;
  up.w_scale = w.experts_gate_up_fp8.scales;
  up.num_experts = e;
  up.n = inter;
  up.k = h;
  up.out = b.act.get();
  up.tiles = b.tiles.get();
  up.num_tiles = b.num_tiles.get();
  up.max_tiles = moe_max_tiles(num_pairs, e, tile_rows);
  up.tile_rows = tile_rows;
  moe_gemm(up, stream);

  MoeGemmParams down = up;
  down.kind = MoeGemmKind::kPlain;
  down.a = b.act.get();
  down.pairs = nullptr;
  down.w = w.experts_down;
  down.w_fp8 = w.experts_down_fp8.codes;
  down.w_scale = w.experts_down_fp8.scales;
  down.n = h;
  down.k = inter;
  down.out = b.expert_out.get();
  moe_gemm(down, stream);

  out.expert_out = b.expert_out.get();
  out.ids = b.ids.get();
  out.weights = b.weights.get();
  out.row_of = b.row_of.get();
  out.num_tokens = t;
  out.top_k = k;
  out.hidden = h;
  moe_combine(out, stream);
}

}  // namespace optimate::cuda
