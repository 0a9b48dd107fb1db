#include "engine/engine.h"

#include <algorithm>

#include "core/error.h"
#include "core/logging.h"

namespace optimate {
namespace {

constexpr int64_t kIdleRetryNs = 1'000'000;

uint64_t mix_seed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

sched::SchedulerConfig scheduler_config(const EngineConfig& c, const ModelRunner& runner) {
  const KvCacheShape& shape = runner.kv_shape();
  if (c.block_size != shape.block_size)
    fail(ErrorCode::kInvalidArgument, "block-size {} differs from the runner's KV cache ({})",
         c.block_size, shape.block_size);
  if (c.num_kv_blocks != 0 && c.num_kv_blocks != shape.num_blocks)
    fail(ErrorCode::kInvalidArgument, "num-kv-blocks {} differs from the runner's KV cache ({})",
         c.num_kv_blocks, shape.num_blocks);
  // The cache stores what the runner stores; other tags come with KV quantization.
  if (shape.element_bits != 32 && shape.element_bits != 16)
    fail(ErrorCode::kUnsupported, "the runner's KV cache stores {}-bit values (32 or 16 supported)",
         shape.element_bits);
  const kv::KvPrecision stored = shape.element_bits == 32 ? kv::KvPrecision::kF32 : kv::KvPrecision::kBF16;
  const kv::KvPrecision precision = kv::parse_kv_precision(c.kv_cache_dtype, stored);
  if (precision != stored)
    fail(ErrorCode::kUnsupported, "kv-cache-dtype {} is not supported by this backend ({} only)",
         c.kv_cache_dtype, kv::kv_precision_name(stored));
  sched::SchedulerConfig s;
  s.max_num_seqs = c.max_num_seqs;
  s.max_num_batched_tokens = c.max_num_batched_tokens;
  s.max_model_len = c.max_model_len > 0 ? c.max_model_len : runner.config().max_position_embeddings;
  s.block_size = shape.block_size;
  s.num_kv_blocks = shape.num_blocks;
  s.enable_prefix_caching = c.enable_prefix_caching;
  s.kv_precision = precision;
  s.eos_token_ids = runner.config().eos_token_ids;
  return s;
}

}  // namespace

Engine::Engine(EngineConfig config, EngineParts parts)
    : config_(std::move(config)),
      runner_(std::move(parts.runner)),
      codec_(std::move(parts.codec)),
      clock_(parts.clock ? std::move(parts.clock) : std::make_shared<SteadyClock>()),
      registry_(std::move(parts.registry)) {
  config_.validate();
  OPTIMATE_CHECK(runner_ != nullptr, "engine without a model runner");
  if (config_.scheduling_policy != "fcfs" &&
      std::none_of(config_.optimizers.begin(), config_.optimizers.end(),
                   [&](const OptimizerSpec& s) { return s.name == config_.scheduling_policy; }))
    config_.optimizers.insert(config_.optimizers.begin(), OptimizerSpec{config_.scheduling_policy, {}});
  for (const auto& spec : config_.optimizers)
    optimizers_.emplace_back(spec, spec.enabled ? registry_.build(spec, build_context()) : optim::PolicySet{});
  std::vector<std::pair<std::string, optim::PolicySet>> enabled;
  for (const auto& [spec, set] : optimizers_)
    if (spec.enabled) enabled.emplace_back(spec.name, set);
  scheduler_ = std::make_unique<sched::Scheduler>(scheduler_config(config_, *runner_),
                                                  optim::merge_policy_sets(enabled), *clock_);
  outputs_ = std::make_unique<OutputProcessor>(codec_);
  sampler_ = std::make_unique<cpu::Sampler>(runner_->config().vocab_size);
  next_seed_ = mix_seed(config_.seed);
}

Engine::Engine(Engine&&) noexcept = default;
Engine::~Engine() = default;

void Engine::add_request(const std::string& request_id, std::string_view prompt,
                         const SamplingParams& params, const RequestMetadata& metadata) {
  if (!codec_)
    fail(ErrorCode::kInvalidArgument, "request '{}': this engine has no tokenizer; send token ids",
         request_id);
  add_request(request_id, codec_->encode(prompt), params, metadata);
}

void Engine::add_request(const std::string& request_id, std::vector<int32_t> prompt_ids,
                         const SamplingParams& params, const RequestMetadata& metadata) {
  if (request_id.empty()) fail(ErrorCode::kInvalidArgument, "request id must not be empty");
  if (scheduler_->has_request(request_id))
    fail(ErrorCode::kInvalidArgument, "request id '{}' is already in use", request_id);
  params.validate();
  if (!params.stop.empty() && !codec_)
    fail(ErrorCode::kInvalidArgument, "request '{}': stop strings need a tokenizer", request_id);
  const int64_t vocab = runner_->config().vocab_size;
  for (int32_t id : prompt_ids)
    if (id < 0 || id >= vocab)
      fail(ErrorCode::kInvalidArgument, "request '{}': token id {} is outside the vocabulary ({})",
           request_id, id, vocab);
  if (params.logprobs && *params.logprobs > vocab)
    fail(ErrorCode::kInvalidArgument, "logprobs must be at most the vocabulary size {}", vocab);
  auto shared = std::make_shared<const SamplingParams>(params);
  const uint64_t seed = params.seed ? *params.seed : mix_seed(next_seed_++);
  RequestMetadata engine_metadata = metadata;
  engine_metadata.priority = to_engine_priority(config_.priority_order, metadata.priority);
  scheduler_->add_request(request_id, prompt_ids, shared, engine_metadata, seed);
  for (int64_t i = 0; i < params.n; ++i) outputs_->add(request_id, i, prompt_ids, shared);
}

bool Engine::abort(const std::string& request_id) {
  auto outs = scheduler_->abort(request_id);
  if (outs.empty()) return false;
  for (auto& o : outs) {
    outputs_->process(o);
    pending_.push_back(std::move(o));
  }
  return true;
}

bool Engine::has_unfinished() const { return scheduler_->has_unfinished() || !pending_.empty(); }

void Engine::set_optimizer(const OptimizerSpec& spec) {
  auto it = std::find_if(optimizers_.begin(), optimizers_.end(),
                         [&](const auto& o) { return o.first.name == spec.name; });
  optim::PolicySet built = spec.enabled ? registry_.build(spec, build_context()) : optim::PolicySet{};
  if (it == optimizers_.end()) {
    optimizers_.emplace_back(spec, std::move(built));
  } else {
    // Re-enabling with unchanged options keeps the optimizer's state.
    if (!(spec.enabled && it->first.options == spec.options && it->second.all().size() > 0))
      it->second = std::move(built);
    it->first = spec;
  }
  apply_policies();
  spdlog::info("optimizer '{}' {}", spec.name, spec.enabled ? "enabled" : "disabled");
}

optim::BuildContext Engine::build_context() const { return {config_.priority_order}; }

void Engine::apply_policies() {
  std::vector<std::pair<std::string, optim::PolicySet>> enabled;
  for (const auto& [spec, set] : optimizers_)
    if (spec.enabled) enabled.emplace_back(spec.name, set);
  scheduler_->set_policies(optim::merge_policy_sets(enabled));
}

std::vector<OptimizerCounters> Engine::optimizer_counters() const {
  std::vector<OptimizerCounters> out;
  for (const optim::Policy* p : scheduler_->policies().all())
    out.push_back({std::string(p->name()), p->counters()});
  return out;
}

void Engine::tick_controller() {
  const auto& controller = scheduler_->policies().controller;
  if (!controller) return;
  const int64_t now = clock_->now_ns();
  if (now < next_tick_ns_) return;
  next_tick_ns_ = now + static_cast<int64_t>(controller->interval_ms() * 1e6);
  const auto& c = scheduler_->config();
  const optim::KnobChanges changes =
      controller->tick(scheduler_->metrics(), {c.max_num_seqs, c.max_num_batched_tokens});
  if (changes.max_num_seqs || changes.max_num_batched_tokens)
    scheduler_->set_limits(changes.max_num_seqs.value_or(c.max_num_seqs),
                           changes.max_num_batched_tokens.value_or(c.max_num_batched_tokens));
  for (const auto& name : changes.disable_optimizers) {
    auto it = std::find_if(optimizers_.begin(), optimizers_.end(),
                           [&](const auto& o) { return o.first.name == name; });
    if (it == optimizers_.end() || !it->first.enabled) continue;
    OptimizerSpec spec = it->first;
    spec.enabled = false;
    spdlog::warn("controller '{}' falls back from optimizer '{}'", controller->name(), name);
    set_optimizer(spec);
  }
}

namespace {

// The ids a row may not draw: below min_tokens nothing may end the sequence, so its ending
// tokens (EOS unless ignored, and its stop ids) are suppressed. Replaces `out`.
void suppressed_ids(const sched::Request& r, std::span<const int64_t> eos, std::vector<int32_t>& out) {
  out.clear();
  const SamplingParams& p = *r.params;
  if (r.num_output_tokens() >= p.min_tokens) return;
  if (!p.ignore_eos)
    for (int64_t id : eos) out.push_back(static_cast<int32_t>(id));
  for (int64_t id : p.stop_token_ids) out.push_back(static_cast<int32_t>(id));
}

// Rows the device samplers cannot draw: penalties and logprobs need the whole row on the host,
// and so do suppressed ids (`scratch` receives them).
bool needs_host_sampling(const sched::Request& r, std::span<const int64_t> eos, std::vector<int32_t>& scratch) {
  const SamplingParams& p = *r.params;
  if (p.logprobs.has_value() || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
      p.frequency_penalty != 0.0f)
    return true;
  suppressed_ids(r, eos, scratch);
  return !scratch.empty();
}

}  // namespace

bool Engine::sample_on_device(const sched::StepPlan& plan, const ForwardBatch& batch,
                              sched::StepResult& result) {
  // One row that needs the host sends the whole step there (logits of every row are copied);
  // splitting the rows between the samplers is left for when such mixes are common.
  specs_.clear();
  for (const sched::ScheduledSeq& s : plan.seqs) {
    if (!s.want_logits) continue;
    const sched::Request& r = *scheduler_->find(s.seq_id);
    if (needs_host_sampling(r, scheduler_->config().eos_token_ids, suppressed_probe_)) return false;
    specs_.push_back({r.params.get(), r.seed, r.num_output_tokens()});
  }
  if (!runner_->forward_sample(batch, specs_, device_tokens_)) return false;
  OPTIMATE_CHECK(device_tokens_.size() == specs_.size(), "runner sampled {} tokens for {} rows",
                 device_tokens_.size(), specs_.size());
  result.tokens.resize(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) result.tokens[i].token_id = device_tokens_[i];
  return true;
}

void Engine::sample(const sched::StepPlan& plan, sched::StepResult& result) {
  const int64_t vocab = runner_->config().vocab_size;
  rows_.clear();
  suppressed_.resize(plan.seqs.size());
  size_t row = 0;
  for (const sched::ScheduledSeq& s : plan.seqs) {
    if (!s.want_logits) continue;
    const sched::Request& r = *scheduler_->find(s.seq_id);
    const SamplingParams& p = *r.params;
    std::vector<int32_t>& suppressed = suppressed_[row];
    suppressed_ids(r, scheduler_->config().eos_token_ids, suppressed);
    cpu::SampleInput in;
    in.logits = std::span<const float>(logits_.data() + row * vocab, static_cast<size_t>(vocab));
    in.params = &p;
    in.seed = r.seed;
    in.output_index = r.num_output_tokens();
    in.prompt_ids = std::span<const int32_t>(r.token_ids).first(r.num_prompt_tokens);
    in.output_ids = std::span<const int32_t>(r.token_ids).subspan(r.num_prompt_tokens);
    in.suppressed_ids = suppressed;
    rows_.push_back(in);
    ++row;
  }
  OPTIMATE_CHECK(logits_.size() >= row * vocab, "runner returned {} logits for {} rows",
                 logits_.size(), row);
  sampler_->sample_batch(rows_, samples_);
  result.tokens.resize(rows_.size());
  for (size_t i = 0; i < rows_.size(); ++i) {
    const cpu::SampleOutput& s = samples_[i];
    result.tokens[i].token_id = s.token_id;
    if (!rows_[i].params->logprobs) continue;
    sched::TokenLogprobs lp;
    lp.sampled = {s.token_id, s.logprob, 0};
    for (size_t t = 0; t < s.top_logprobs.size(); ++t) {
      const int64_t rank = static_cast<int64_t>(t) + 1;
      lp.top.push_back({s.top_logprobs[t].token_id, s.top_logprobs[t].logprob, rank});
      if (s.top_logprobs[t].token_id == s.token_id) lp.sampled.rank = rank;
    }
    result.tokens[i].logprobs = std::move(lp);
  }
}

std::vector<RequestOutput> Engine::step() {
  std::vector<RequestOutput> out = std::move(pending_);
  pending_.clear();
  tick_controller();
  const sched::StepPlan plan = scheduler_->schedule();
  idle_until_ns_.reset();
  if (plan.empty()) {
    // Nothing ran: without a retry time from the batch policy, look again after a short
    // pause rather than spin.
    if (scheduler_->has_unfinished())
      idle_until_ns_ = plan.retry_at_ns > 0 ? plan.retry_at_ns : clock_->now_ns() + kIdleRetryNs;
    return out;
  }
  ForwardBatch batch;
  batch.seqs.reserve(plan.seqs.size());
  for (const auto& s : plan.seqs)
    batch.seqs.push_back({s.token_ids, s.start_pos, s.block_ids, s.want_logits});
  sched::StepResult result;
  if (!sample_on_device(plan, batch, result)) {
    runner_->forward(batch, logits_);
    sample(plan, result);
  }
  for (RequestOutput& o : scheduler_->update(plan, result)) {
    if (outputs_->process(o))
      scheduler_->finish_sequence(o.request_id, o.index, FinishReason::kStop, o.stop_reason);
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace optimate
