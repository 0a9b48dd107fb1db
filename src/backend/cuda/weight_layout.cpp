#include "backend/cuda/weight_layout.h"

#include "core/error.h"

namespace optimate::cuda {
namespace {

// Separate tensors start on 256-byte boundaries (cuBLASLt and 16-byte vector loads).
constexpr int64_t kAlignElems = 128;

}  // namespace

const WeightSegment& WeightLayout::find(WeightPart part, int64_t layer) const {
  for (const auto& s : segments)
    if (s.part == part && s.layer == layer) return s;
  fail(ErrorCode::kInternal, "weight layout has no part {} of layer {}", static_cast<int>(part),
       layer);
}

WeightLayout weight_layout(const ModelConfig& c) {
  WeightLayout layout;
  int64_t offset = 0;
  auto add = [&](WeightPart part, int64_t layer, std::vector<int64_t> shape, bool fused_next) {
    WeightSegment s{part, layer, offset, std::move(shape)};
    offset += s.num_elems();
    if (!fused_next) offset = (offset + kAlignElems - 1) / kAlignElems * kAlignElems;
    layout.segments.push_back(std::move(s));
  };
  const int64_t h = c.hidden_size, q_dim = c.num_heads * c.head_dim,
                kv_dim = c.num_kv_heads * c.head_dim, inter = c.intermediate_size;
  const int64_t experts = c.moe.num_experts, expert_inter = c.moe.expert_intermediate_size;
  add(WeightPart::kEmbed, -1, {c.vocab_size, h}, false);
  add(WeightPart::kFinalNorm, -1, {h}, false);
  if (!c.tie_word_embeddings) add(WeightPart::kLmHead, -1, {c.vocab_size, h}, false);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    add(WeightPart::kAttnNorm, l, {h}, false);
    add(WeightPart::kWq, l, {q_dim, h}, true);
    add(WeightPart::kWk, l, {kv_dim, h}, true);
    add(WeightPart::kWv, l, {kv_dim, h}, false);
    if (c.attention_bias) {
      add(WeightPart::kBq, l, {q_dim}, true);
      add(WeightPart::kBk, l, {kv_dim}, true);
      add(WeightPart::kBv, l, {kv_dim}, false);
    }
    if (c.qk_norm) {
      add(WeightPart::kQNorm, l, {c.head_dim}, false);
      add(WeightPart::kKNorm, l, {c.head_dim}, false);
    }
    add(WeightPart::kWo, l, {h, q_dim}, false);
    add(WeightPart::kFfnNorm, l, {h}, false);
    if (c.is_moe()) {
      add(WeightPart::kRouter, l, {experts, h}, false);
      add(WeightPart::kExpertsGateUp, l, {experts, 2 * expert_inter, h}, false);
      add(WeightPart::kExpertsDown, l, {experts, h, expert_inter}, false);
      continue;
    }
    add(WeightPart::kGate, l, {inter, h}, true);
    add(WeightPart::kUp, l, {inter, h}, false);
    add(WeightPart::kDown, l, {h, inter}, false);
  }
  layout.total_elems = offset;
  return layout;
}

}  // namespace optimate::cuda
