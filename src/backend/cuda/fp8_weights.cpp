// The codes of all layers come first in fp8_storage ([n, k] per matrix, in layer order), then
// all their scales, so every matrix starts 16-byte aligned (k % 16 == 0) and every scale
// vector 4-byte aligned. The bf16 tensors left are copied device to device into a new
// allocation with weight_layout's alignment, keeping bq, bk, bv contiguous as bqkv.
#include "backend/cuda/fp8_weights.h"

#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/weight_layout.h"
#include "core/error.h"
#include "model/fp8_quant.h"

namespace optimate::cuda {
namespace {

constexpr int64_t kAlignElems = 128;  // as weight_layout: 256-byte starts

bool quantized_part(WeightPart p) {
  switch (p) {
    case WeightPart::kWq: case WeightPart::kWk: case WeightPart::kWv: case WeightPart::kWo:
    case WeightPart::kGate: case WeightPart::kUp: case WeightPart::kDown:
    case WeightPart::kExpertsGateUp: case WeightPart::kExpertsDown:
      return true;
    default:
      return false;
  }
}

// Continues the run of the segment before it (bqkv's parts), so no alignment gap.
bool fused_with_previous(WeightPart p) { return p == WeightPart::kBk || p == WeightPart::kBv; }

struct Matrix {
  int64_t rows, cols;
};

// The four FP8 matrices of a layer: wqkv, wo, w_gate_up, w_down; with experts, the last two are
// every expert's stacked ([num_experts * rows, cols], a scale per row of each expert).
std::vector<Matrix> layer_matrices(const ModelConfig& c) {
  const int64_t h = c.hidden_size, q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  const int64_t experts = c.is_moe() ? c.moe.num_experts : 1, inter = c.mlp_width();
  return {{q_dim + 2 * kv_dim, h}, {h, q_dim}, {experts * 2 * inter, h}, {experts * h, inter}};
}

struct Compact {
  struct Move {
    int64_t from, to, elems;
  };
  std::vector<Move> moves;
  int64_t total_elems = 0;
};

Compact compact_layout(const WeightLayout& layout) {
  Compact c;
  int64_t offset = 0;
  for (const WeightSegment& s : layout.segments) {
    if (quantized_part(s.part)) continue;
    if (!fused_with_previous(s.part)) offset = (offset + kAlignElems - 1) / kAlignElems * kAlignElems;
    c.moves.push_back({s.offset, offset, s.num_elems()});
    offset += s.num_elems();
  }
  c.total_elems = offset;
  return c;
}

int64_t code_bytes(const ModelConfig& c) {
  int64_t b = 0;
  for (const Matrix& m : layer_matrices(c)) b += m.rows * m.cols;
  return b * c.num_layers;
}

int64_t scale_count(const ModelConfig& c) {
  int64_t n = 0;
  for (const Matrix& m : layer_matrices(c)) n += m.rows;
  return n * c.num_layers;
}

}  // namespace

int64_t cuda_fp8_weight_bytes(const ModelConfig& config) {
  return compact_layout(weight_layout(config)).total_elems * 2 + code_bytes(config) + scale_count(config) * 4;
}

CudaWeights quantize_weights_fp8(CudaWeights weights) {
  OPTIMATE_CHECK(!weights.fp8(), "weights are already FP8");
  const ModelConfig& c = weights.config;
  for (const Matrix& m : layer_matrices(c))
    if (m.cols % kFp8ColsMultiple != 0)
      fail(ErrorCode::kUnsupported, "--quantization fp8 needs every linear layer's input width to be a multiple "
           "of {}; this model has one of {}", kFp8ColsMultiple, m.cols);

  CudaWeights out;
  out.config = c;
  const int64_t codes_total = code_bytes(c);
  out.fp8_storage.resize(static_cast<size_t>(codes_total + scale_count(c) * 4));
  auto* codes = reinterpret_cast<__nv_fp8_e4m3*>(out.fp8_storage.get());
  auto* scales = reinterpret_cast<float*>(out.fp8_storage.get() + codes_total);
  for (const CudaLayerWeights& src : weights.layers) {
    CudaLayerWeights dst = src;
    const bool moe = c.is_moe();
    const __nv_bfloat16* bf16[4] = {src.wqkv, src.wo, moe ? src.experts_gate_up : src.w_gate_up,
                                    moe ? src.experts_down : src.w_down};
    Fp8Weight* fp8[4] = {&dst.wqkv_fp8, &dst.wo_fp8, moe ? &dst.experts_gate_up_fp8 : &dst.w_gate_up_fp8,
                         moe ? &dst.experts_down_fp8 : &dst.w_down_fp8};
    const std::vector<Matrix> shapes = layer_matrices(c);
    for (int i = 0; i < 4; ++i) {
      quantize_fp8_rows(bf16[i], shapes[i].rows, shapes[i].cols, codes, scales, nullptr);
      *fp8[i] = {codes, scales};
      codes += shapes[i].rows * shapes[i].cols;
      scales += shapes[i].rows;
    }
    dst.wqkv = dst.wo = dst.w_gate_up = dst.w_down = dst.experts_gate_up = dst.experts_down = nullptr;
    out.layers.push_back(dst);
  }

  const Compact compact = compact_layout(weight_layout(c));
  out.storage.resize(static_cast<size_t>(compact.total_elems));
  for (const Compact::Move& m : compact.moves)
    OPTIMATE_CUDA_CHECK(cudaMemcpy(out.storage.get() + m.to, weights.storage.get() + m.from, m.elems * 2,
                                   cudaMemcpyDeviceToDevice));
  // Every bf16 pointer kept moves by its segment's shift.
  auto relocate = [&](const __nv_bfloat16* p) -> const __nv_bfloat16* {
    if (!p) return nullptr;
    const int64_t at = p - weights.storage.get();
    for (const Compact::Move& m : compact.moves)
      if (at >= m.from && at < m.from + m.elems) return out.storage.get() + m.to + (at - m.from);
    fail(ErrorCode::kInternal, "a kept weight at element {} is in no segment", at);
  };
  out.tok_embeddings = relocate(weights.tok_embeddings);
  out.final_norm = relocate(weights.final_norm);
  out.lm_head = relocate(weights.lm_head);
  for (CudaLayerWeights& l : out.layers) {
    l.attn_norm = relocate(l.attn_norm);
    l.bqkv = relocate(l.bqkv);
    l.q_norm = relocate(l.q_norm);
    l.k_norm = relocate(l.k_norm);
    l.ffn_norm = relocate(l.ffn_norm);
    l.router = relocate(l.router);
  }
  OPTIMATE_CUDA_CHECK(cudaDeviceSynchronize());
  return out;  // `weights` and its bf16 storage go here
}

}  // namespace optimate::cuda
