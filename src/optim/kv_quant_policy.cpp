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

kv::Int4Keys int4_keys_of(const std::string& text) {
  if (text == "token") return kv::Int4Keys::kPerToken;
  if (text == "channel") return kv::Int4Keys::kPerChannel;
  fail(ErrorCode::kInvalidArgument, "optimizers.kv_quant.int4_keys must be \"token\" or \"channel\", got '{}'", text);
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
  o.int4_keys = int4_keys_of(r.get_string("int4_keys", "token"));
  if (o.int4_keys == kv::Int4Keys::kPerChannel && o.precision != kv::KvPrecision::kInt4)
    fail(ErrorCode::kInvalidArgument, "optimizers.kv_quant.int4_keys = \"channel\" needs bits = 4");
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
      to_engine_priority(order, ClientPriority{r.get_int("full_precision_min_priority", client_default)});
  o.keep_recent_tokens = r.get_int("keep_recent_tokens", o.keep_recent_tokens);
  o.keep_first_tokens = r.get_int("keep_first_tokens", o.keep_first_tokens);
  o.max_blocks_per_step = r.get_int("max_blocks_per_step", o.max_blocks_per_step);
  if (o.keep_recent_tokens < 0 || o.keep_first_tokens < 0 || o.max_blocks_per_step < 1)
    fail(ErrorCode::kInvalidArgument, "optimizers.kv_quant: keep_recent_tokens and keep_first_tokens must "
         "be >= 0 and max_blocks_per_step >= 1");
  o.protect_priority = r.get_bool("protect_priority", o.protect_priority);
  for (auto [key, value] : {std::pair{"quality_fp8", &o.quality_fp8}, std::pair{"quality_int8", &o.quality_int8},
                            std::pair{"quality_int4", &o.quality_int4}}) {
    *value = r.get_double(key, *value);
    if (!(*value >= 0.0 && *value < 10.0))
      fail(ErrorCode::kInvalidArgument, "optimizers.kv_quant.{} is a perplexity change (0.01 = +1%) in [0, 10), "
           "got {}", key, *value);
  }
  return o;
}

KvLayoutRequest kv_layout_request(std::span<const OptimizerSpec> specs) {
  KvLayoutRequest out;
  for (const OptimizerSpec& spec : specs) {
    if (spec.name != "kv_quant") continue;
    out.finest = kv::KvPrecision::kInt8;
    if (auto it = spec.options.find("bits"); it != spec.options.end()) {
      if (auto* i = std::get_if<int64_t>(&it->second)) out.finest = bits_precision(std::to_string(*i));
      else if (auto* s = std::get_if<std::string>(&it->second)) out.finest = bits_precision(*s);
      else fail(ErrorCode::kInvalidArgument, "optimizers.kv_quant.bits must be 8, 4 or \"fp8\"");
    }
    if (auto it = spec.options.find("int4_keys"); it != spec.options.end()) {
      if (auto* text = std::get_if<std::string>(&it->second)) out.int4_keys = int4_keys_of(*text);
      else fail(ErrorCode::kInvalidArgument, "optimizers.kv_quant.int4_keys must be \"token\" or \"channel\"");
    }
  }
  return out;
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
  return !(options_.priority_aware && r.metadata.priority >= options_.full_precision_min_priority);
}

bool KvQuantPolicy::protecting(const SchedulerView& view) const {
  if (!options_.priority_aware || !options_.protect_priority || !view.kv.finest_precision) return false;
  // Nothing quantized and nothing to be: the batch is what full precision holds already.
  const auto& by_code = view.kv.used_blocks_by_code;
  if (!active_ && !view.knobs.kv_quant_precision && by_code[1] + by_code[2] + by_code[3] == 0) return false;
  const auto important = [&](const RequestView& r) { return !eligible(r); };
  return std::any_of(view.running.begin(), view.running.end(), important) ||
         std::any_of(view.waiting.begin(), view.waiting.end(), important);
}

std::optional<KvPolicy::Footprint> KvQuantPolicy::admission_footprint(const SchedulerView& view) {
  observe(view);
  if (!protecting(view)) return std::nullopt;
  return Footprint{view.kv.num_blocks, options_.full_precision_min_priority};
}

bool KvQuantPolicy::room_serves_priority(const SchedulerView& view) const {
  if (!options_.priority_aware || !options_.protect_priority) return true;
  const auto important = [&](const RequestView& r) { return !eligible(r); };
  if (std::none_of(view.running.begin(), view.running.end(), important)) return true;
  if (std::any_of(view.waiting.begin(), view.waiting.end(), important)) return true;
  // The running sequences' next blocks: one each at most before the next step.
  return view.kv.num_free_blocks < static_cast<int64_t>(view.running.size());
}

std::optional<kv::KvPrecision> KvQuantPolicy::quantize_to(const SchedulerView& view) {
  observe(view);
  if (view.knobs.kv_quant_precision) return view.knobs.kv_quant_precision;
  if (active_) return options_.precision;
  return std::nullopt;
}

kv::KvPrecision KvQuantPolicy::precision_for(const SchedulerView& view, const RequestView&) {
  if (!view.kv.finest_precision)
    fail(ErrorCode::kInvalidArgument, "kv_quant needs a KV cache laid out for quantized blocks: restart with "
         "the optimizer configured (its `bits` sets the finest precision the cache holds)");
  // A new block holds the sequence's newest tokens, which are never stored quantized: it is
  // requantized once it is full and has left the keep_recent_tokens window.
  return view.kv.default_precision;
}

double KvQuantPolicy::quality_estimate(const KvView& kv) const {
  int64_t total = 0;
  for (int64_t n : kv.used_blocks_by_code) total += n;
  if (total == 0) return 0.0;
  const double cost[4] = {0.0, options_.quality_fp8, options_.quality_int8, options_.quality_int4};
  double sum = 0.0;
  for (size_t code = 1; code < 4; ++code) sum += cost[code] * static_cast<double>(kv.used_blocks_by_code[code]);
  return sum / static_cast<double>(total);
}

std::vector<RequantizeOrder> KvQuantPolicy::requantize(const SchedulerView& view) {
  std::vector<RequantizeOrder> orders;
  quality_estimate_ = quality_estimate(view.kv);
  const auto precision = quantize_to(view);
  if (!precision || !view.kv.finest_precision) return orders;
  if (!room_serves_priority(view)) {
    ++held_for_priority_;
    return orders;
  }
  orders = requantize_orders(view, *precision);
  // The mix once these orders are applied (each asks for full blocks that are there to take).
  KvView after = view.kv;
  for (const RequantizeOrder& o : orders) {
    after.used_blocks_by_code[0] -= o.max_blocks;
    after.used_blocks_by_code[kv::precision_code(o.precision)] += o.max_blocks;
  }
  quality_estimate_ = quality_estimate(after);
  return orders;
}

std::vector<RequantizeOrder> KvQuantPolicy::requantize_orders(const SchedulerView& view, kv::KvPrecision precision) {
  std::vector<RequantizeOrder> orders;
  const int64_t bs = std::max<int64_t>(1, view.kv.block_size);
  const int64_t first = (options_.keep_first_tokens + bs - 1) / bs;
  std::vector<const RequestView*> candidates;
  for (const RequestView& r : view.running)
    if (eligible(r) && r.num_full_blocks > 0) candidates.push_back(&r);
  // Least important first; among equals the newest (most of its run still ahead).
  std::sort(candidates.begin(), candidates.end(), [](const RequestView* a, const RequestView* b) {
    if (a->metadata.priority != b->metadata.priority) return a->metadata.priority < b->metadata.priority;
    return a->arrival_ns > b->arrival_ns;
  });
  int64_t left = options_.max_blocks_per_step;
  for (const RequestView* r : candidates) {
    if (left <= 0) break;
    // Whole blocks written, minus those holding any of the newest keep_recent_tokens.
    const int64_t end = std::max<int64_t>(0, r->num_computed_tokens - options_.keep_recent_tokens) / bs;
    if (end <= first) continue;
    // Blocks outside [first, end) are never quantized: the full ones inside are the rest.
    const int64_t outside = std::min(first, r->num_blocks) + std::max<int64_t>(0, r->num_blocks - end);
    const int64_t n = std::min(left, std::min(end - first, r->num_full_blocks - outside));
    if (n <= 0) continue;
    orders.push_back({r->seq_id, first, end - first, precision, n});
    left -= n;
    requantize_orders_ += n;
    spdlog::debug("kv_quant: requantize up to {} blocks of '{}' (priority {}) to {}: KV cache {:.1f}% used",
                  n, r->request_id, r->metadata.priority.value, kv::kv_precision_name(precision),
                  100 * view.kv.usage());
  }
  return orders;
}

std::vector<PolicyCounter> KvQuantPolicy::counters() const {
  return {{"active", active_ ? 1.0 : 0.0},
          {"activations", static_cast<double>(activations_)},
          {"requantize_orders", static_cast<double>(requantize_orders_)},
          {"held_for_priority", static_cast<double>(held_for_priority_)},
          {"quality_estimate", quality_estimate_}};
}

}  // namespace optimate::optim
