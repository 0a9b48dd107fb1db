#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "sampling/rng.h"
#include "core/error.h"

namespace optimate::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

Sampler::Sampler(int64_t vocab_size)
    : vocab_size_(vocab_size),
      z_(vocab_size),
      order_(vocab_size),
      values_(vocab_size),
      counts_(vocab_size, 0),
      seen_(vocab_size, 0) {
  if (vocab_size < 1) fail(ErrorCode::kInvalidArgument, "sampler vocab_size must be positive, got {}", vocab_size);
}

float Sampler::process(const SampleInput& in) {
  OPTIMATE_CHECK(in.params != nullptr, "sample input without parameters");
  const SamplingParams& p = *in.params;
  if (static_cast<int64_t>(in.logits.size()) != vocab_size_)
    fail(ErrorCode::kInvalidArgument, "logits row has {} entries, the vocabulary {}", in.logits.size(), vocab_size_);
  auto check_ids = [&](std::span<const int32_t> ids, const char* what) {
    for (int32_t id : ids)
      if (id < 0 || id >= vocab_size_)
        fail(ErrorCode::kInvalidArgument, "{} token id {} outside the vocabulary of {}", what, id, vocab_size_);
  };
  check_ids(in.prompt_ids, "prompt");
  check_ids(in.output_ids, "output");
  check_ids(in.suppressed_ids, "suppressed");
  if (!in.allowed_mask.empty() && static_cast<int64_t>(in.allowed_mask.size()) != token_mask_words(vocab_size_))
    fail(ErrorCode::kInvalidArgument, "token mask has {} words, the vocabulary needs {}", in.allowed_mask.size(),
         token_mask_words(vocab_size_));

  std::copy(in.logits.begin(), in.logits.end(), z_.begin());
  restrict_and_bias(in);
  if (p.repetition_penalty != 1.0f) {
    const float r = p.repetition_penalty;
    auto penalize = [&](int32_t id) {
      if (seen_[id]) return;
      seen_[id] = 1;
      z_[id] = z_[id] < 0.0f ? z_[id] * r : z_[id] / r;
    };
    for (int32_t id : in.prompt_ids) penalize(id);
    for (int32_t id : in.output_ids) penalize(id);
    for (int32_t id : in.prompt_ids) seen_[id] = 0;
    for (int32_t id : in.output_ids) seen_[id] = 0;
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (int32_t id : in.output_ids) ++counts_[id];
    for (int32_t id : in.output_ids) {
      if (counts_[id] == 0) continue;
      z_[id] -= p.frequency_penalty * static_cast<float>(counts_[id]) + p.presence_penalty;
      counts_[id] = 0;
    }
  }
  for (int32_t id : in.suppressed_ids) z_[id] = kNegInf;
  if (!in.allowed_mask.empty()) {
    apply_mask(in.allowed_mask);
    if (*std::max_element(z_.begin(), z_.end()) == kNegInf) {
      std::copy(in.logits.begin(), in.logits.end(), z_.begin());
      apply_mask(in.allowed_mask);
    }
  }
  if (!p.greedy()) {
    const float t = p.temperature;
    for (float& v : z_) v = v / t;
  }
  return *std::max_element(z_.begin(), z_.end());
}

void Sampler::restrict_and_bias(const SampleInput& in) {
  const SamplingParams& p = *in.params;
  if (!p.allowed_token_ids.empty()) {
    for (int32_t id : p.allowed_token_ids)
      if (id >= 0 && id < vocab_size_) seen_[id] = 1;
    for (int64_t id = 0; id < vocab_size_; ++id)
      if (!seen_[id]) z_[id] = kNegInf;
    for (int32_t id : p.allowed_token_ids)
      if (id >= 0 && id < vocab_size_) seen_[id] = 0;
  }
  for (const auto& word : p.bad_words_token_ids) {
    const size_t prefix = word.size() - 1;
    if (prefix > in.output_ids.size()) continue;
    if (!std::equal(word.begin(), word.begin() + static_cast<std::ptrdiff_t>(prefix),
                    in.output_ids.end() - static_cast<std::ptrdiff_t>(prefix)))
      continue;
    if (word.back() >= 0 && word.back() < vocab_size_) z_[word.back()] = kNegInf;
  }
  for (const auto& [id, bias] : p.logit_bias)
    if (id >= 0 && id < vocab_size_) z_[id] += bias;
}

void Sampler::apply_mask(std::span<const uint32_t> mask) {
  for (int64_t id = 0; id < vocab_size_; ++id)
    if (!((mask[id >> 5] >> (id & 31)) & 1u)) z_[id] = kNegInf;
}

bool Sampler::truncate(const SamplingParams& p, float max_z) {
  const bool use_k = p.top_k > 0 && p.top_k < vocab_size_;
  const bool use_p = p.top_p < 1.0f;
  const bool use_min_p = p.min_p > 0.0f;
  if (!use_k && !use_p && !use_min_p) return false;

  float k_threshold = kNegInf;
  if (use_k) {
    std::copy(z_.begin(), z_.end(), values_.begin());
    std::nth_element(values_.begin(), values_.begin() + (p.top_k - 1), values_.end(), std::greater<>());
    k_threshold = values_[p.top_k - 1];
  }
  const float min_p_threshold = use_min_p ? max_z + std::log(p.min_p) : kNegInf;
  kept_.clear();
  if (!use_p) {
    const float threshold = std::max(k_threshold, min_p_threshold);
    for (int32_t id = 0; id < vocab_size_; ++id)
      if (z_[id] >= threshold) kept_.push_back(id);
    return true;
  }

  // Top-p keeps a prefix of the (z desc, id asc) order; sort only as much of it as needed.
  size_t num_candidates = 0;
  float total = 0.0f;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (z_[id] < k_threshold) continue;
    order_[num_candidates++] = id;
    total += std::exp(z_[id] - max_z);
  }
  const float mass = p.top_p * total;
  auto before = [&](int32_t a, int32_t b) { return z_[a] > z_[b] || (z_[a] == z_[b] && a < b); };
  const auto first = order_.begin();
  const auto last = order_.begin() + static_cast<std::ptrdiff_t>(num_candidates);
  size_t cut = 0;
  for (size_t prefix = 64;; prefix *= 8) {
    const size_t n = std::min(prefix, num_candidates);
    if (n < num_candidates) std::nth_element(first, first + n, last, before);
    std::sort(first, first + n, before);
    float cumulative = 0.0f;
    size_t r = 0;
    for (; r < n && (r == 0 || cumulative < mass); ++r) cumulative += std::exp(z_[order_[r]] - max_z);
    if (r < n || n == num_candidates) {
      cut = r;
      break;
    }
  }
  for (size_t r = 0; r < cut; ++r)
    if (z_[order_[r]] >= min_p_threshold) kept_.push_back(order_[r]);
  std::sort(kept_.begin(), kept_.end());
  return true;
}

SampleOutput Sampler::sample(const SampleInput& in) {
  const SamplingParams& p = *in.params;
  SampleOutput out;
  const float max_z = process(in);
  if (p.greedy()) {
    out.token_id = static_cast<int32_t>(std::find(z_.begin(), z_.end(), max_z) - z_.begin());
  } else {
    const float target_u = sampling_uniform(in.seed, static_cast<uint64_t>(in.output_index));
    auto draw = [&](auto&& for_each_kept) {
      float total = 0.0f;
      for_each_kept([&](int32_t id) { total += std::exp(z_[id] - max_z); });
      const float target = target_u * total;
      float running = 0.0f;
      int32_t chosen = -1;
      for_each_kept([&](int32_t id) {
        if (chosen >= 0 && running > target) return;
        const float w = std::exp(z_[id] - max_z);
        if (w == 0.0f) return;
        running += w;
        chosen = id;
      });
      return chosen;
    };
    if (truncate(p, max_z)) {
      out.token_id = draw([&](auto&& f) { for (int32_t id : kept_) f(id); });
    } else {
      out.token_id = draw([&](auto&& f) { for (int32_t id = 0; id < vocab_size_; ++id) f(id); });
    }
    OPTIMATE_CHECK(out.token_id >= 0, "no token left to sample");
  }
  if (p.logprobs) fill_logprobs(in, max_z, out);
  return out;
}

void Sampler::sample_batch(std::span<const SampleInput> rows, std::vector<SampleOutput>& out) {
  out.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = sample(rows[i]);
}

void Sampler::fill_logprobs(const SampleInput& in, float max_z, SampleOutput& out) {
  float sum = 0.0f;
  for (float v : z_) sum += std::exp(v - max_z);
  const float log_norm = max_z + std::log(sum);
  out.logprob = z_[out.token_id] - log_norm;
  const float chosen = z_[out.token_id];
  out.rank = 1 + std::count_if(z_.begin(), z_.end(), [&](float v) { return v > chosen; });
  const int64_t n = std::min<int64_t>(*in.params->logprobs, vocab_size_);
  out.top_logprobs.clear();
  if (n <= 0) return;
  std::iota(order_.begin(), order_.end(), 0);
  std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), [&](int32_t a, int32_t b) {
    return z_[a] > z_[b] || (z_[a] == z_[b] && a < b);
  });
  for (int64_t i = 0; i < n; ++i) out.top_logprobs.push_back({order_[i], z_[order_[i]] - log_norm});
}

void Sampler::distribution(const SampleInput& in, std::vector<float>& probs) {
  const SamplingParams& p = *in.params;
  const float max_z = process(in);
  probs.assign(vocab_size_, 0.0f);
  if (p.greedy()) {
    probs[std::find(z_.begin(), z_.end(), max_z) - z_.begin()] = 1.0f;
    return;
  }
  if (!truncate(p, max_z)) {
    kept_.resize(vocab_size_);
    std::iota(kept_.begin(), kept_.end(), 0);
  }
  float total = 0.0f;
  for (int32_t id : kept_) total += (probs[id] = std::exp(z_[id] - max_z));
  for (int32_t id : kept_) probs[id] /= total;
}

}  // namespace optimate::sampling
