#include "parallel/tp_partition.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/error.h"

namespace optimate::parallel {
namespace {

// The sizes from 2 up that divide `n`, for an error message ("1" when none).
std::string divisors(int64_t n) {
  std::string out = "1";
  for (int64_t d = 2; d <= std::min<int64_t>(n, 64); ++d)
    if (n % d == 0) out += ", " + std::to_string(d);
  return out;
}

}  // namespace

int64_t TpPartition::vocab_begin(int rank) const { return std::min(vocab_size, rank * vocab_per_rank); }
int64_t TpPartition::vocab_end(int rank) const { return std::min(vocab_size, (rank + 1) * vocab_per_rank); }

TpPartition plan_tp_partition(const ModelConfig& c, int64_t n) {
  if (n < 1) fail(ErrorCode::kInvalidArgument, "tensor-parallel-size must be at least 1, got {}", n);
  // A mixture of experts splits each expert's features (its router stays whole on every rank).
  const int64_t features = c.mlp_width();
  const int64_t common = std::gcd(std::gcd(c.num_heads, c.num_kv_heads), features);
  auto check = [&](int64_t size, const char* what) {
    if (size % n != 0)
      fail(ErrorCode::kInvalidArgument,
           "tensor-parallel-size {} does not divide the model's {} {}; sizes that split this model: {}", n,
           size, what, divisors(common));
  };
  check(c.num_heads, "attention heads");
  check(c.num_kv_heads, "KV heads");
  check(features, c.is_moe() ? "expert intermediate features" : "MLP intermediate features");
  TpPartition p;
  p.num_ranks = static_cast<int>(n);
  p.heads_per_rank = c.num_heads / n;
  p.kv_heads_per_rank = c.num_kv_heads / n;
  p.intermediate_per_rank = features / n;
  p.vocab_size = c.vocab_size;
  p.vocab_per_rank = (c.vocab_size + n - 1) / n;
  if (p.vocab_begin(p.num_ranks - 1) >= c.vocab_size)
    fail(ErrorCode::kInvalidArgument, "the vocabulary of {} tokens is too small to split over {} ranks",
         c.vocab_size, n);
  return p;
}

ModelConfig rank_model_config(const ModelConfig& config, const TpPartition& p) {
  ModelConfig c = config;
  c.num_heads = p.heads_per_rank;
  c.num_kv_heads = p.kv_heads_per_rank;
  if (c.is_moe()) c.moe.expert_intermediate_size = p.intermediate_per_rank;
  else c.intermediate_size = p.intermediate_per_rank;
  return c;
}

}  // namespace optimate::parallel
