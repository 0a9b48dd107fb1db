#include "optim/kv_quant_policy.h"

#include <algorithm>

#include "core/error.h"
#include "core/logging.h"
#include "optim/registry.h"

namespace optimate::optim {
namespace {

kv::KvPrecision bits_precision(const std::string& bits) {
  if (bits == "8" || bits == "int8") return kv::KvPrecision::kInt8;
  if (bits == "4" || bits == "int4") return kv::KvPrecision::kInt4;
  if (bits == "fp8" || bits == "fp8_e4m3") return kv::KvPrecision::kFP8;
  fail(ErrorCode::kInvalidArgument, "optimizers.kv_quant.bits must be 8, 4 or \"fp8\", got '{}'", bits);
}

// `bits` comes as an integer (8, 4) or a string ("fp8").
kv::KvPrecision read_bits(OptionReader& r) {
  const std::string text = r.get_int_or_string("bits", "8");
  return bits_precision(text);
}

}  // namespace

KvQuantOptions KvQuantOptions::read(OptionReader& r, PriorityOrder order) {
  KvQuantOptions o;
  o.precision = read_bits(r);
  o.activation_threshold = r.get_double("activation_threshold", o.activation_threshold);
  o.deactivation_threshold = r.get_double("deactivation_threshold", std::min(o.deactivation_threshold,
                                                                               o.activation_threshold));
  if (!(o.activation_threshold >= 0 && o.activation_threshold <= 1))
    fail(ErrorCode::kInvalidArgument, "optimizers.kv_quant.activation_threshold must be in [0, 1], got {}",
         o.activation_threshold);
  if (!(o.deactivation_threshold >= 0 && o.deactivation_threshold <= o.activation_threshold))
    fail(ErrorCode::kInvalidArgument, "optimizers.kv_quant.deactivation_threshold must be in [0, "
         "activation_threshold], got {}", o.deactivation_threshold);
  o.priority_aware = r.get_bool("priority_aware", o.priority_aware);
  // Clients name the threshold in their own convention: higher-first, 1 and above are
  // important; lower-first (vLLM), -1 and below.
  const int64_t client_default = order == PriorityOrder::kHigherFirst ? 1 : -1;
  o.full_precision_min_priority =
      to_engine_priority(order, r.get_int("full_precision_min_priority", client_default));
  o.keep_recent_tokens = r.get_int("keep_recent_tokens", o.keep_recent_tokens);
  o.keep_first_tokens = r.get_int("keep_first_tokens", o.keep_first_tokens);
  o.max_blocks_per_step = r.get_int("max_blocks_per_step", o.max_blocks_per_step);
  if (o.keep_recent_tokens < 0 || o.keep_first_tokens < 0 || o.max_blocks_per_step < 1)
    fail(ErrorCode::kInvalidArgument, "optimizers.kv_quant: keep_recent_tokens and keep_first_tokens must "
         "be >= 0 and max_blocks_per_step >= 1");
  return o;
}

std::optional<kv::KvPrecision> kv_quant_layout_precision(const OptimizerSpec& spec) {
  if (spec.name != "kv_quant") return std::nullopt;
  auto it = spec.options.find("bits");
  if (it == spec.options.end()) return kv::KvPrecision::kInt8;
  if (auto* i = std::get_if<int64_t>(&it->second)) return bits_precision(std::to_string(*i));
  if (auto* s = std::get_if<std::string>(&it->second)) return bits_precision(*s);
  fail(ErrorCode::kInvalidArgument, "optimizers.kv_quant.bits must be 8, 4 or \"fp8\"");
}

void KvQuantPolicy::observe(const SchedulerView& view) {
  if (view.now_ns == last_now_ns_) return;  // once per decision time
  last_now_ns_ = view.now_ns;
  const double used = view.kv.usage();
  if (!active_ && used >= options_.activation_threshold) {
    active_ = true;
    ++activations_;
    spdlog::debug("kv_quant: on, KV cache {:.1f}% used (threshold {:.0f}%)", 100 * used,
                  100 * options_.activation_threshold);
  } else if (active_ && used < options_.deactivation_threshold) {
    active_ = false;
    spdlog::debug("kv_quant: off, KV cache {:.1f}% used", 100 * used);
  }
}

bool KvQuantPolicy::eligible(const RequestView& r) const {
  return !(options_.priority_aware && r.priority >= options_.full_precision_min_priority);
}

std::optional<kv::KvPrecision> KvQuantPolicy::quantize_to(const SchedulerView& view) {
  observe(view);
  if (view.knobs.kv_quant_precision) return view.knobs.kv_quant_precision;
  if (active_) return options_.precision;
  return std::nullopt;
}

kv::KvPrecision KvQuantPolicy::precision_for(const SchedulerView& view, const RequestView& request) {
  const auto precision = quantize_to(view);
  if (!precision || !eligible(request)) return view.kv.default_precision;
  ++quantized_allocations_;
  return *precision;
}

std::vector<RequantizeOrder> KvQuantPolicy::requantize(const SchedulerView& view) {
  std::vector<RequantizeOrder> orders;
  const auto precision = quantize_to(view);
  if (!precision) return orders;
  const int64_t bs = std::max<int64_t>(1, view.kv.block_size);
  const int64_t first = (options_.keep_first_tokens + bs - 1) / bs;
  std::vector<const RequestView*> candidates;
  for (const RequestView& r : view.running)
    if (eligible(r) && r.num_full_blocks > 0) candidates.push_back(&r);
  // Least important first; among equals the newest (most of its run still ahead).
  std::sort(candidates.begin(), candidates.end(), [](const RequestView* a, const RequestView* b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    return a->arrival_ns > b->arrival_ns;
  });
  int64_t left = options_.max_blocks_per_step;
  for (const RequestView* r : candidates) {
    if (left <= 0) break;
    // Whole blocks written, minus the newest keep_recent_tokens.
    const int64_t end = std::max<int64_t>(0, r->num_computed_tokens - options_.keep_recent_tokens) / bs;
    if (end <= first) continue;
    const int64_t n = std::min(left, std::min(end - first, r->num_full_blocks));
    orders.push_back({r->seq_id, first, end - first, *precision, n});
    left -= n;
    requantize_orders_ += n;
    spdlog::debug("kv_quant: requantize up to {} blocks of '{}' (priority {}) to {}: KV cache {:.1f}% used",
                  n, r->request_id, r->priority, kv::kv_precision_name(*precision),
                  100 * view.kv.usage());
  }
  return orders;
}

std::vector<PolicyCounter> KvQuantPolicy::counters() const {
  return {{"active", active_ ? 1.0 : 0.0},
          {"activations", static_cast<double>(activations_)},
          {"quantized_allocations", static_cast<double>(quantized_allocations_)},
          {"requantize_orders", static_cast<double>(requantize_orders_)}};
}

}  // namespace optimate::optim
