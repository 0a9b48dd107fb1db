// Mixture-of-experts routing as both backends compute it (the CPU runner uses it; the GPU's
// routing kernels are tested against it): the router's logits to each token's top-k experts and
// their weights, and the (token, slot) pairs grouped by expert for per-expert matrix products.
//
// As transformers (Qwen3MoeTopKRouter, MixtralTopKRouter): softmax over the experts in fp32,
// the k largest probabilities, divided by their sum when the config renormalizes. Exact ties
// go to the lower expert index (torch.topk leaves their order unspecified, so a reference can
// only agree where tied experts compute the same thing); slots are in descending probability.
#pragma once

#include <cstdint>
#include <vector>

namespace optimate {

// logits [num_tokens, num_experts] -> experts and weights [num_tokens, top_k] (slot order:
// descending probability, ties to the lower index). 1 <= top_k <= num_experts.
void route_tokens(const float* logits, int64_t num_tokens, int64_t num_experts, int64_t top_k, bool renormalize,
                  int32_t* experts, float* weights);

// The pairs (token, slot) of a routing, grouped by expert: expert e's pairs are
// pairs[offsets[e], offsets[e + 1]), tokens ascending, each as token * top_k + slot. With
// `pad_rows` > 1 every expert's run starts at a multiple of it (padding entries are -1), so
// per-expert row groups stay aligned for kernels that take rows in groups.
struct ExpertGroups {
  std::vector<int64_t> offsets;  // [num_experts + 1]
  std::vector<int64_t> counts;   // [num_experts]: pairs of each expert (padding not counted)
  std::vector<int32_t> pairs;    // [offsets.back()]
  std::vector<int32_t> row_of;   // [num_tokens * top_k]: a pair's index in `pairs`
};

void group_by_expert(const int32_t* experts, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                     int64_t pad_rows, ExpertGroups& out);

}  // namespace optimate
