#include "model/moe_routing.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace optimate {

void route_tokens(const float* logits, int64_t num_tokens, int64_t num_experts, int64_t top_k, bool renormalize,
                  int32_t* experts, float* weights) {
  OPTIMATE_CHECK(top_k >= 1 && top_k <= num_experts, "top-{} of {} experts", top_k, num_experts);
  std::vector<float> probs(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits + t * num_experts;
    const float max = *std::max_element(row, row + num_experts);
    float sum = 0.0f;
    for (int64_t e = 0; e < num_experts; ++e) sum += probs[e] = std::exp(row[e] - max);
    for (float& p : probs) p /= sum;
    int32_t* ids = experts + t * top_k;
    float* w = weights + t * top_k;
    // k passes of a strict maximum: the first of equal values wins, so ties go to the lower index.
    for (int64_t s = 0; s < top_k; ++s) {
      int64_t best = -1;
      for (int64_t e = 0; e < num_experts; ++e) {
        if (std::find(ids, ids + s, static_cast<int32_t>(e)) != ids + s) continue;
        if (best < 0 || probs[e] > probs[best]) best = e;
      }
      ids[s] = static_cast<int32_t>(best);
      w[s] = probs[best];
    }
    if (renormalize) {
      float total = 0.0f;
      for (int64_t s = 0; s < top_k; ++s) total += w[s];
      for (int64_t s = 0; s < top_k; ++s) w[s] /= total;
    }
  }
}

void group_by_expert(const int32_t* experts, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                     int64_t pad_rows, ExpertGroups& out) {
  OPTIMATE_CHECK(pad_rows >= 1, "pad_rows {}", pad_rows);
  const int64_t num_pairs = num_tokens * top_k;
  std::vector<int64_t>& counts = out.counts;
  counts.assign(static_cast<size_t>(num_experts), 0);
  for (int64_t p = 0; p < num_pairs; ++p) {
    OPTIMATE_CHECK(experts[p] >= 0 && experts[p] < num_experts, "expert {} of {}", experts[p], num_experts);
    ++counts[experts[p]];
  }
  out.offsets.assign(static_cast<size_t>(num_experts + 1), 0);
  for (int64_t e = 0; e < num_experts; ++e)
    out.offsets[e + 1] = out.offsets[e] + (counts[e] + pad_rows - 1) / pad_rows * pad_rows;
  out.pairs.assign(static_cast<size_t>(out.offsets.back()), -1);
  out.row_of.resize(static_cast<size_t>(num_pairs));
  std::vector<int64_t> next(out.offsets.begin(), out.offsets.end() - 1);
  for (int64_t p = 0; p < num_pairs; ++p) {  // pairs in token order: tokens ascend within an expert
    const int64_t row = next[experts[p]]++;
    out.pairs[row] = static_cast<int32_t>(p);
    out.row_of[p] = static_cast<int32_t>(row);
  }
}

}  // namespace optimate
