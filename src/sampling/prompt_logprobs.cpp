#include "sampling/prompt_logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace optimate::sampling {

void prompt_logprobs(std::span<const float> logits, int64_t vocab_size, std::span<const int32_t> targets,
                     int64_t num_top, std::vector<PositionLogprobs>& out) {
  OPTIMATE_CHECK(static_cast<int64_t>(logits.size()) >= static_cast<int64_t>(targets.size()) * vocab_size,
                 "{} logits for {} prompt rows of {}", logits.size(), targets.size(), vocab_size);
  const int64_t k = std::clamp<int64_t>(num_top, 0, vocab_size);
  std::vector<int32_t> order;
  if (k > 0) order.resize(static_cast<size_t>(vocab_size));
  for (size_t j = 0; j < targets.size(); ++j) {
    const float* row = logits.data() + j * static_cast<size_t>(vocab_size);
    const int32_t target = targets[j];
    if (target < 0 || target >= vocab_size)
      fail(ErrorCode::kInvalidArgument, "prompt token id {} outside the vocabulary of {}", target, vocab_size);
    const float max = *std::max_element(row, row + vocab_size);
    double sum = 0.0;
    for (int64_t i = 0; i < vocab_size; ++i) sum += std::exp(static_cast<double>(row[i] - max));
    const float log_norm = max + static_cast<float>(std::log(sum));
    PositionLogprobs p;
    p.token = {target, row[target] - log_norm};
    p.rank = 1 + std::count_if(row, row + vocab_size, [&](float v) { return v > row[target]; });
    if (k > 0) {
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      for (int64_t i = 0; i < k; ++i) p.top.push_back({order[i], row[order[i]] - log_norm});
    }
    out.push_back(std::move(p));
  }
}

}  // namespace optimate::sampling
