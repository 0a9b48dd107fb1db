#include "engine/engine.h"

#include "core/error.h"
#include "core/logging.h"
#include "engine/kv_cache_report.h"
#include "sampling/prompt_logprobs.h"
#include "sampling/sample_row.h"

namespace optimate {
namespace {

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
  // The runner's cache was laid out for the setting; a hand-built engine must agree with it.
  const kv::KvPrecision precision = kv::kv_precision_for(c.kv_cache_dtype, shape.layout.full);
  if (precision != shape.layout.base)
    fail(ErrorCode::kInvalidArgument, "kv-cache-dtype {} differs from the runner's KV cache ({})",
         choice_name(c.kv_cache_dtype), kv::kv_precision_name(shape.layout.base));
  const StepCapacity capacity = runner.capacity();
  if (c.max_num_seqs > capacity.max_num_seqs || c.max_num_batched_tokens > capacity.max_num_batched_tokens)
    fail(ErrorCode::kInvalidArgument,
         "max-num-seqs {} / max-num-batched-tokens {} exceed what the runner allocated ({} / {})",
         c.max_num_seqs, c.max_num_batched_tokens, capacity.max_num_seqs, capacity.max_num_batched_tokens);
  if (c.max_model_len > capacity.max_model_len)
    fail(ErrorCode::kInvalidArgument, "max-model-len {} exceeds what the runner allocated ({})",
         c.max_model_len, capacity.max_model_len);
  sched::SchedulerConfig s;
  s.max_num_seqs = c.max_num_seqs;
  s.max_num_batched_tokens = c.max_num_batched_tokens;
  s.max_model_len = engine_context_length(c.max_model_len, runner);
  s.block_size = shape.block_size;
  s.num_kv_blocks = shape.num_blocks;
  s.enable_prefix_caching = c.enable_prefix_caching;
  s.kv_layout = shape.layout;
  s.kv_free_order = shape.free_order;
  s.eos_token_ids = runner.config().eos_token_ids;
  // The host tier as the runner was built with it (create_engine_parts planned it).
  s.host_slots = shape.host_tier;
  s.kv_bytes_per_slot = 2 * shape.num_layers * shape.layout.slot_bytes;
  s.host_link_bytes_per_s = runner.host_link_bytes_per_s();
  s.preemption_mode = c.preemption_mode;
  return s;
}

}  // namespace

Engine::Engine(EngineConfig config, EngineParts parts)
    : config_(std::move(config)),
      runner_(std::move(parts.runner)),
      codec_(std::move(parts.codec)),
      clock_(parts.clock ? std::move(parts.clock) : std::make_shared<SteadyClock>()),
      step_estimator_(std::move(parts.step_estimator)),
      decisions_(std::move(parts.decisions)),
      trace_(std::move(parts.trace)) {
  config_.validate();
  OPTIMATE_CHECK(runner_ != nullptr, "engine without a model runner");
  if (!decisions_ && !config_.decision_log.empty()) decisions_ = DecisionLog::open_file(config_.decision_log);
  if (!trace_ && !config_.record_trace.empty()) trace_ = TraceRecorder::open_file(config_.record_trace);
  guard_ = std::make_shared<GuardContext>();
  guard_->clock = parts.policy_clock ? std::move(parts.policy_clock) : std::make_shared<SteadyClock>();
  guard_->engine_clock = clock_;
  guard_->decisions = decisions_;
  guard_->priority_order = config_.priority_order;
  optimizers_ = std::make_unique<OptimizerSet>(std::move(parts.registry), build_context(), guard_);
  kernels_ = std::make_unique<KernelGuard>(*runner_);
  check_kernels(config_.optimizers);
  optimizers_->configure(config_.optimizers);
  scheduler_ = std::make_unique<sched::Scheduler>(scheduler_config(config_, *runner_),
                                                  optimizers_->policies(), *clock_);
  profiler_ = std::make_unique<StepProfiler>(config_.stage_profile_interval);
  if (step_estimator_) throughput_ = std::make_unique<ThroughputGuard>();
  apply_hot_settings();
  apply_policies();
  outputs_ = std::make_unique<OutputProcessor>(codec_);
  sampler_ = std::make_unique<sampling::Sampler>(runner_->config().vocab_size);
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
  if (params.prompt_logprobs && *params.prompt_logprobs > vocab)
    fail(ErrorCode::kInvalidArgument, "prompt_logprobs must be at most the vocabulary size {}", vocab);
  if (sampling::allows_only_suppressed(params, runner_->config().eos_token_ids))
    fail(ErrorCode::kInvalidArgument, "allowed_token_ids holds only tokens that end the sequence, which "
         "min_tokens ({}) forbids before its first tokens: allow other tokens or drop min_tokens", params.min_tokens);
  auto shared = std::make_shared<const SamplingParams>(params);
  const uint64_t seed = params.seed ? *params.seed : mix_seed(next_seed_++);
  const int64_t num_prompt_tokens = static_cast<int64_t>(prompt_ids.size());
  scheduler_->add_request(request_id, prompt_ids, shared, metadata, seed);
  for (int64_t i = 0; i < params.n; ++i) outputs_->add(request_id, i, prompt_ids, shared);
  const int64_t now = clock_->now_ns();
  const int64_t arrival_ns = metadata.arrival_ns.value_or(now);
  if (window_) window_->on_arrival(request_id, params.n, arrival_ns, now);
  if (trace_)  // a trace is replayed as a client's requests: their priorities in its convention
    trace_->record(arrival_ns, num_prompt_tokens, params.max_tokens,
                   to_client_priority(config_.priority_order, metadata.priority).value);
  if (params.constraint) matchers_.add(request_id, params.n, *params.constraint);
  if (params.prompt_logprobs) prompt_logprobs_.add(request_id, params.n);
  if (sampling::may_need_host_sampling(params)) host_sampled_[request_id] = params.n;
}

bool Engine::abort(const std::string& request_id) {
  auto outs = scheduler_->abort(request_id);
  if (outs.empty()) return false;
  matchers_.remove(request_id);
  prompt_logprobs_.remove(request_id);
  host_sampled_.erase(request_id);
  for (auto& o : outs) {
    outputs_->process(o);
    pending_.push_back(std::move(o));
  }
  return true;
}

bool Engine::has_unfinished() const {
  return scheduler_->has_unfinished() || !pending_.empty() || in_flight_.has_value();
}

optim::BuildContext Engine::build_context() const { return {config_.priority_order}; }

EngineLimits Engine::limits() const {
  const sched::SchedulerConfig& s = scheduler_->config();
  return {s.max_model_len, s.num_kv_blocks, s.block_size, s.max_num_seqs, s.max_num_batched_tokens,
          runner_->capacity()};
}

void Engine::set_limits(int64_t max_num_seqs, int64_t max_num_batched_tokens) {
  const StepCapacity capacity = runner_->capacity();
  if (max_num_seqs > capacity.max_num_seqs)
    fail(ErrorCode::kInvalidArgument, "max-num-seqs {} is more than the runner allocated for ({})",
         max_num_seqs, capacity.max_num_seqs);
  if (max_num_batched_tokens > capacity.max_num_batched_tokens)
    fail(ErrorCode::kInvalidArgument, "max-num-batched-tokens {} is more than the runner allocated for ({})",
         max_num_batched_tokens, capacity.max_num_batched_tokens);
  scheduler_->set_limits(max_num_seqs, max_num_batched_tokens);
}

bool Engine::device_specs(const sched::StepPlan& plan) {
  // One row that needs the host sends the whole step there (logits of every row are copied);
  // splitting the rows between the samplers is left for when such mixes are common.
  specs_.clear();
  for (const sched::ScheduledSeq& s : plan.seqs) {
    if (s.all_logits) return false;
    if (!s.want_logits) continue;
    if (sampling::needs_host_sampling(s.sample)) return false;
    specs_.push_back({s.sample.params.get(), s.sample.seed, s.sample.output_index});
  }
  return true;
}

void Engine::take_device_tokens(sched::StepResult& result) const {
  result.tokens.resize(device_tokens_.size());
  for (size_t i = 0; i < device_tokens_.size(); ++i) result.tokens[i].token_id = device_tokens_[i];
}

bool Engine::sample_on_device(const sched::StepPlan& plan, const ForwardBatch& batch,
                              sched::StepResult& result) {
  if (!device_specs(plan) || !runner_->forward_sample(batch, specs_, device_tokens_)) return false;
  OPTIMATE_CHECK(device_tokens_.size() == specs_.size(), "runner sampled {} tokens for {} rows",
                 device_tokens_.size(), specs_.size());
  take_device_tokens(result);
  return true;
}

void Engine::sample(const sched::StepPlan& plan, sched::StepResult& result) {
  const int64_t vocab = runner_->config().vocab_size;
  rows_.clear();
  size_t row = 0;  // logits row of the slice's first row: all_logits slices have one per token
  for (const sched::ScheduledSeq& s : plan.seqs) {
    const size_t num_rows = s.all_logits ? s.token_ids.size() : s.want_logits ? 1 : 0;
    OPTIMATE_CHECK(logits_.size() >= (row + num_rows) * vocab, "runner returned {} logits, the plan wants more",
                   logits_.size());
    // s.sample is set only on the chunk that samples: the request holds the params.
    const sched::Request* r = s.prompt_targets.empty() ? nullptr : scheduler_->find(s.seq_id);
    if (r && r->params->prompt_logprobs) {
      position_logprobs_.clear();
      sampling::prompt_logprobs(std::span<const float>(logits_.data() + row * vocab, s.prompt_targets.size() * vocab),
                                vocab, s.prompt_targets, *r->params->prompt_logprobs, position_logprobs_);
      prompt_logprobs_.collect(r->request_id, s.start_pos + 1, position_logprobs_);
    }
    if (s.want_logits) {
      sampling::SampleInput in;
      in.logits = std::span<const float>(logits_.data() + (row + num_rows - 1) * vocab, static_cast<size_t>(vocab));
      in.params = s.sample.params.get();
      in.seed = s.sample.seed;
      in.output_index = s.sample.output_index;
      in.prompt_ids = s.sample.prompt_ids;
      in.output_ids = s.sample.output_ids;
      in.suppressed_ids = s.sample.suppressed_ids;
      in.allowed_mask = matchers_.mask(rows_.size());
      rows_.push_back(in);
    }
    row += num_rows;
  }
  sampler_->sample_batch(rows_, samples_);
  result.tokens.resize(rows_.size());
  for (size_t i = 0; i < rows_.size(); ++i) {
    const sampling::SampleOutput& s = samples_[i];
    result.tokens[i].token_id = s.token_id;
    if (!rows_[i].params->logprobs) continue;
    sched::TokenLogprobs lp;
    lp.sampled = {s.token_id, s.logprob, s.rank};
    for (size_t t = 0; t < s.top_logprobs.size(); ++t)
      lp.top.push_back({s.top_logprobs[t].token_id, s.top_logprobs[t].logprob, static_cast<int64_t>(t) + 1});
    result.tokens[i].logprobs = std::move(lp);
  }
}

void Engine::run_once(const sched::StepPlan& plan, const ForwardBatch& batch, sched::StepResult& result) {
  logits_.clear();
  if (!sample_on_device(plan, batch, result)) {
    matchers_.start_masks(plan, *scheduler_, runner_->config().vocab_size);  // while the runner computes
    runner_->forward(batch, logits_);
    matchers_.wait();
    phase("forward");
    sample(plan, result);
    phase("sample");
  } else {
    phase("forward");
  }
}

void Engine::finish_output(RequestOutput& out) {
  prompt_logprobs_.attach(out);
  if (matchers_.empty()) return;
  const auto [advance, num_accepted] = matchers_.accept(out);
  if (advance == TokenMatchers::Advance::kRefused) {
    // The sampler drew outside the grammar's mask: the mask allowed nothing (a grammar that
    // leads nowhere this vocabulary can follow). The refused token never reaches the client.
    const size_t refused = out.new_token_ids.size() - num_accepted;
    out.new_token_ids.resize(num_accepted);
    out.logprobs.resize(std::min(out.logprobs.size(), num_accepted));
    out.usage.completion_tokens -= static_cast<int64_t>(refused);
    if (out.finished) {  // by the refused token itself (EOS, max_tokens): not a normal end
      out.finish_reason = FinishReason::kAbort;
      out.stop_reason = {};
    }
  }
  // The grammar's end token was also the last one max_tokens allowed: a whole output.
  if (out.finished && out.finish_reason == FinishReason::kLength && advance == TokenMatchers::Advance::kTerminated)
    out.finish_reason = FinishReason::kStop;
  if (!out.finished && advance != TokenMatchers::Advance::kOk) {
    // End the sequence rather than let it leave the grammar.
    const FinishReason reason = advance == TokenMatchers::Advance::kTerminated ? FinishReason::kStop : FinishReason::kAbort;
    if (reason == FinishReason::kAbort)
      spdlog::warn("request '{}': its grammar allows no token here; ending the sequence", out.request_id);
    scheduler_->finish_sequence(out.request_id, out.index, reason, {});
    out.finished = true;
    out.finish_reason = reason;
  }
}

void Engine::phase(const char* name) {
  const int64_t now = clock_->now_ns();
  profiler_->add_phase(name, now - phase_mark_ns_);
  phase_mark_ns_ = now;
}

void Engine::process_output(RequestOutput& o) {
  finish_output(o);
  if (outputs_->process(o))
    scheduler_->finish_sequence(o.request_id, o.index, FinishReason::kStop, o.stop_reason);
  if (!o.finished) return;
  if (!matchers_.empty()) matchers_.finish(o.request_id, o.index);
  if (auto it = host_sampled_.find(o.request_id); it != host_sampled_.end() && --it->second == 0)
    host_sampled_.erase(it);
}

}  // namespace optimate
