#include "server/engine_backend.h"

#include <chrono>
#include <climits>
#include <filesystem>
#include <future>

#include <fmt/ranges.h>

#include "core/logging.h"
#include "engine/tokenizer_codec.h"
#include "optim/api/policy_set.h"
#include "optim/priority_levels.h"
#include "optim/registry.h"
#include "server/api_error.h"
#include "structured/grammar_compiler.h"

namespace optimate::server {
namespace {

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json option_json(const OptionValue& v) {
  return std::visit([](const auto& x) { return Json(x); }, v);
}

OptionValue option_value(const std::string& key, const Json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return as_int(v, "options." + key);
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return v.get<std::string>();
  bad_request("options." + key, "option '{}' must be a boolean, number or string", key);
}

Json stop_reason_json(const std::variant<std::monostate, int64_t, std::string>& reason) {
  if (const auto* id = std::get_if<int64_t>(&reason)) return *id;
  if (const auto* text = std::get_if<std::string>(&reason)) return *text;
  return nullptr;
}

}  // namespace

// One request's bridge from engine outputs to its sink, shared by the listener callbacks.
struct EngineBackend::Live {
  OutputSink sink;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::atomic<int64_t>* num_live = nullptr;
  // The prompt tokens of sequences that have produced nothing yet (GET /get_load).
  std::atomic<int64_t>* unscheduled_tokens = nullptr;
  std::vector<bool> seen;      // per sequence: it has produced an output; engine thread only
  int64_t num_unfinished = 0;  // engine thread only
  int64_t num_prompt_tokens = 0;
  int32_t first_prompt_token = 0;
  bool tokens_as_ids = false;
  bool want_prompt_logprobs = false;
  std::vector<bool> prompt_given;  // per sequence: its first output carried the prompt logprobs

  TokenAlternative alternative(const sched::TokenLogprob& t) const {
    std::string text = tokens_as_ids ? fmt::format("token_id:{}", t.token_id)
                                     : tokenizer->decode(std::span<const int32_t>(&t.token_id, 1), false);
    return {t.token_id, std::move(text), t.logprob, t.rank};
  }

  LogprobEntry entry(const sched::TokenLogprobs& lp) const {
    LogprobEntry e{alternative(lp.sampled), {}, true};
    for (const sched::TokenLogprob& t : lp.top) e.top.push_back(alternative(t));
    return e;
  }

  // The sequence's prompt leaves the unscheduled count at its first output (or its end).
  void mark_seen(int64_t index) {
    if (index < 0 || index >= static_cast<int64_t>(seen.size()) || seen[index]) return;
    seen[index] = true;
    unscheduled_tokens->fetch_sub(num_prompt_tokens);
  }

  void on_output(RequestOutput out) {
    mark_seen(out.index);
    GenerationOutput g;
    g.index = out.index;
    g.text = std::move(out.text);
    g.num_new_tokens = static_cast<int64_t>(out.new_token_ids.size());
    g.token_ids = out.new_token_ids;
    g.num_prompt_tokens = num_prompt_tokens;
    if (out.queue_ns >= 0) g.queue_s = static_cast<double>(out.queue_ns) * 1e-9;
    for (const sched::TokenLogprobs& lp : out.logprobs) g.logprobs.push_back(entry(lp));
    if (want_prompt_logprobs && out.index >= 0 && out.index < static_cast<int64_t>(prompt_given.size()) &&
        !prompt_given[out.index] && !out.new_token_ids.empty()) {
      prompt_given[out.index] = true;
      // The first prompt token has no logprob: nothing predicts it.
      g.prompt_logprobs.push_back({alternative({first_prompt_token, 0.0f, 0}), {}, false});
      for (const sched::TokenLogprobs& lp : out.prompt_logprobs) g.prompt_logprobs.push_back(entry(lp));
    }
    if (out.finished) {
      g.finished = true;
      g.finish_reason = sched::finish_reason_name(out.finish_reason);
      g.stop_reason = stop_reason_json(out.stop_reason);
    }
    std::vector<GenerationOutput> outs;
    outs.push_back(std::move(g));
    sink(std::move(outs));
    if (out.finished && --num_unfinished == 0) num_live->fetch_sub(1);
  }

  // The engine refused the request after submission (or a step failed): every choice still
  // open ends as aborted so the client gets a response instead of a hung connection.
  void on_error(const Error& e, int64_t n) {
    spdlog::error("request failed in the engine: {}", e.what());
    for (int64_t i = 0; i < n; ++i) mark_seen(i);
    if (num_unfinished == 0) return;
    std::vector<GenerationOutput> outs;
    for (int64_t i = 0; i < n; ++i) {
      GenerationOutput g;
      g.index = i;
      g.finished = true;
      g.finish_reason = "abort";
      g.num_prompt_tokens = num_prompt_tokens;
      outs.push_back(std::move(g));
    }
    num_unfinished = 0;
    sink(std::move(outs));
    num_live->fetch_sub(1);
  }
};

EngineBackend::EngineBackend(Engine engine, EngineBackendOptions options,
                             metrics::ServingMetrics* metrics)
    : options_(std::move(options)), metrics_(metrics) {
  const auto* codec = dynamic_cast<const TokenizerCodec*>(engine.codec().get());
  if (!codec)
    fail(ErrorCode::kInvalidArgument, "model '{}': serving needs the model's tokenizer",
         engine.config().model);
  tokenizer_ = codec->tokenizer();
  try {
    chat_template_ = tokenizer_->chat_template();
  } catch (const Error& e) {
    chat_template_error_ = e.what();
    spdlog::warn("chat completions are unavailable: {}", e.what());
  }
  info_.id = options_.served_model_name.empty()
                 ? std::filesystem::path(engine.config().model).filename().string()
                 : options_.served_model_name;
  const EngineLimits limits = engine.limits();
  info_.max_model_len = limits.max_model_len;
  info_.vocab_size = engine.runner().config().vocab_size;
  info_.eos_token_ids = engine.runner().config().eos_token_ids;
  info_.created = unix_seconds();
  info_.model_path = engine.config().model;
  info_.tokenizer_path = engine.config().tokenizer.empty() ? engine.config().model : engine.config().tokenizer;
  const HfArchitectureName hf = hf_architecture_name(engine.runner().config().architecture);
  info_.model_type = hf.model_type;
  info_.architectures = {hf.class_name};
  info_.block_size = limits.block_size;
  info_.num_kv_blocks = limits.num_kv_blocks;
  info_.max_num_seqs = limits.max_num_seqs;
  info_.max_num_batched_tokens = limits.max_num_batched_tokens;
  if (chat_template_ && chat_template_->family() != ChatTemplate::Family::kChatMl)
    info_.tool_parser = ToolParser::kLlama3Json;
  eos_token_ids_ = engine.runner().config().eos_token_ids;
  specs_ = engine.config().optimizers;
  info_.priority_order = engine.config().priority_order;
  update_priority_labels();
  config_status_ = {{"version", engine.config_version()}, {"last_reload", nullptr}};
  last_stats_ = engine.stats();
  if (metrics_) on_stats(last_stats_);
  engine_ = std::make_unique<AsyncEngine>(std::move(engine));
  engine_->set_stats_listener([this](const EngineStats& s) { on_stats(s); });
}

EngineBackend::~EngineBackend() { engine_->shutdown(ShutdownMode::kAbort); }

std::vector<int32_t> EngineBackend::tokenize(std::string_view text, bool add_special_tokens) const {
  return tokenizer_->encode(text, add_special_tokens);
}

std::string EngineBackend::detokenize(std::span<const int32_t> ids) const {
  return tokenizer_->decode(ids, /*skip_special_tokens=*/false);
}

std::string EngineBackend::token_string(int32_t id) const { return tokenizer_->id_to_token(id); }

std::string EngineBackend::render_chat(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                       const ChatRenderOptions& options) const {
  if (!chat_template_) throw ApiError(400, "This model has no usable chat template: " + chat_template_error_);
  return chat_template_->render(messages, add_generation_prompt, options);
}

std::shared_ptr<const TokenConstraint> EngineBackend::compile_grammar(const structured::GrammarSpec& spec) {
  if (!structured::GrammarCompiler::available()) return structured::GrammarCompiler(structured::Vocabulary{}).compile(spec);
  {
    std::lock_guard lock(grammar_mutex_);
    if (!grammar_compiler_) {
      // Built on first use: reading the vocabulary into the grammar engine takes a moment.
      structured::Vocabulary v;
      v.encoding = tokenizer_->kind() == "SentencePiece BPE" ? structured::Vocabulary::Encoding::kByteFallback
                                                             : structured::Vocabulary::Encoding::kByteLevel;
      v.vocab_size = info_.vocab_size;
      const int32_t n = std::min<int32_t>(tokenizer_->vocab_size(), static_cast<int32_t>(info_.vocab_size));
      v.tokens.reserve(static_cast<size_t>(n));
      for (int32_t id = 0; id < n; ++id)
        v.tokens.push_back(tokenizer_->is_special(id) ? std::string() : tokenizer_->id_to_token(id));
      for (int64_t id : eos_token_ids_) v.stop_token_ids.push_back(static_cast<int32_t>(id));
      for (int32_t id : tokenizer_->stop_ids())
        if (std::find(v.stop_token_ids.begin(), v.stop_token_ids.end(), id) == v.stop_token_ids.end())
          v.stop_token_ids.push_back(id);
      grammar_vocabulary_ = std::move(v);
      grammar_compiler_ = std::make_unique<structured::GrammarCompiler>(grammar_vocabulary_);
      if (!options_.grammar_worker_command.empty())
        grammar_workers_ = std::make_unique<structured::GrammarWorkers>(
            options_.grammar_worker_command, grammar_vocabulary_, *grammar_compiler_, options_.grammar_deadline_s);
    }
  }
  return grammar_workers_ ? grammar_workers_->compile(spec) : grammar_compiler_->compile(spec);
}

void EngineBackend::submit(BackendRequest request, OutputSink sink) {
  auto live = std::make_shared<Live>();
  live->sink = std::move(sink);
  live->tokenizer = tokenizer_;
  live->num_live = &num_live_;
  live->unscheduled_tokens = &unscheduled_tokens_;
  live->seen.assign(static_cast<size_t>(request.params.n), false);
  live->num_unfinished = request.params.n;
  live->num_prompt_tokens = static_cast<int64_t>(request.prompt_token_ids.size());
  live->first_prompt_token = request.prompt_token_ids.empty() ? 0 : request.prompt_token_ids.front();
  live->tokens_as_ids = request.tokens_as_ids;
  live->want_prompt_logprobs = request.params.prompt_logprobs.has_value();
  live->prompt_given.assign(static_cast<size_t>(request.params.n), false);
  const int64_t n = request.params.n;
  RequestListener listener{[live](RequestOutput out) { live->on_output(std::move(out)); },
                           [live, n](const Error& e) { live->on_error(e, n); }};
  const int64_t prompt_tokens = live->num_prompt_tokens * n;
  num_live_.fetch_add(1);
  unscheduled_tokens_.fetch_add(prompt_tokens);
  try {
    engine_->submit(request.request_id, std::move(request.prompt_token_ids), request.params,
                    request.metadata, std::move(listener));
  } catch (...) {
    num_live_.fetch_sub(1);
    unscheduled_tokens_.fetch_sub(prompt_tokens);
    throw;
  }
}

void EngineBackend::abort(const std::string& request_id) { engine_->abort(request_id); }

int64_t EngineBackend::num_waiting() const {
  // The snapshot lags by up to one step and counts sequences; requests submitted since it was
  // taken are waiting too, so a burst is refused before it reaches the scheduler.
  const EngineStats s = engine_->stats();
  return std::max(s.num_waiting, num_live_.load() - s.num_running);
}

LoadReport EngineBackend::load() const {
  const EngineStats s = engine_->stats();
  // As num_waiting(): requests submitted since the snapshot are waiting too, with their prompts.
  return {s.num_running, num_waiting(), s.kv_used_blocks * info_.block_size,
          std::max(s.num_waiting_tokens, unscheduled_tokens_.load())};
}

void EngineBackend::on_stats(const EngineStats& s) {
  if (metrics::OptimizerMetrics* m = optimizer_metrics_.load()) {
    m->set_seconds(s.optimizer_seconds);
    m->set_fallbacks(s.optimizer_fallbacks);
  }
  if (metrics::StepProfileMetrics* m = step_profile_metrics_.load()) {
    const StepProfile& p = s.step_profile;
    m->set(p.phase_seconds, p.steps, p.device_seconds, p.staged_steps, p.stage_seconds);
  }
  if (!metrics_) return;
  metrics::SchedulerGauges snap;
  snap.num_running = s.num_running;
  snap.num_waiting = s.num_waiting;
  snap.num_waiting_by_priority = s.num_waiting_by_priority;
  snap.kv_used_blocks = s.kv_used_blocks;
  snap.kv_total_blocks = s.kv_total_blocks;
  snap.kv_blocks_by_precision = s.kv_blocks_by_precision;
  snap.kv_usage = s.kv_usage;
  snap.kv_capacity_tokens = s.kv_capacity_tokens;
  snap.optimizer_counters = s.optimizer_counters;
  snap.host_swap_used_blocks = s.host_swap_used_blocks;
  snap.host_swap_total_blocks = s.host_swap_total_blocks;
  snap.host_prefix_cached_blocks = s.host_prefix_cached_blocks;
  snap.host_prefix_total_blocks = s.host_prefix_total_blocks;
  metrics_->set_scheduler_state(snap);
  for (const auto& [precision, count] : s.kv_requantized_by_precision) {
    auto it = last_stats_.kv_requantized_by_precision.find(precision);
    const int64_t before = it == last_stats_.kv_requantized_by_precision.end() ? 0 : it->second;
    if (count > before) metrics_->record_kv_requantized(s.kv_full_precision, precision, count - before);
  }
  if (s.num_steps > last_stats_.num_steps) {
    metrics::StepStats step;
    step.batch_size = s.num_running;
    step.num_prompt_tokens = s.num_prompt_tokens - last_stats_.num_prompt_tokens;
    step.num_generation_tokens = s.num_generation_tokens - last_stats_.num_generation_tokens;
    step.num_preemptions = s.num_preemptions - last_stats_.num_preemptions;
    step.prefix_cache_queries = s.prefix_cache_queries - last_stats_.prefix_cache_queries;
    step.prefix_cache_hits = s.prefix_cache_hits - last_stats_.prefix_cache_hits;
    step.host_prefix_cache_queries = s.host_prefix_cache_queries - last_stats_.host_prefix_cache_queries;
    step.host_prefix_cache_hits = s.host_prefix_cache_hits - last_stats_.host_prefix_cache_hits;
    step.kv_swapped_out_blocks = s.kv_swapped_out_blocks - last_stats_.kv_swapped_out_blocks;
    step.kv_swapped_in_blocks = s.kv_swapped_in_blocks - last_stats_.kv_swapped_in_blocks;
    for (const auto& [mode, reasons] : s.preemptions_by_mode)
      for (const auto& [reason, count] : reasons) {
        const auto m = last_stats_.preemptions_by_mode.find(mode);
        const int64_t before = m == last_stats_.preemptions_by_mode.end() || !m->second.count(reason)
                                   ? 0 : m->second.at(reason);
        step.preemptions_by_mode[mode][reason] = count - before;
      }
    metrics_->record_step(step);
  }
  last_stats_ = s;
}

void EngineBackend::run_and_wait(std::function<void(Engine&)> task) const {
  auto done = std::make_shared<std::promise<void>>();
  auto future = done->get_future();
  engine_->run_on_engine([done, task = std::move(task)](Engine& e) {
    try {
      task(e);
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready)
    throw ApiError(503, "The engine did not answer in time.");
  future.get();  // rethrows what the task threw
}

void EngineBackend::reset_prefix_cache() {
  run_and_wait([](Engine& e) { e.reset_prefix_cache(); });
}

void EngineBackend::update_priority_labels() {
  if (!metrics_) return;
  std::optional<optim::PriorityLabeler> levels;
  {
    std::lock_guard lock(specs_mutex_);
    levels = optim::priority_level_labeler(specs_, info_.priority_order);
  }
  // Without the priority optimizer, the clients' own numbers.
  metrics_->set_priority_labeler(levels ? std::move(*levels) : metrics::fixed_priority_labeler(info_.priority_order));
}

Json EngineBackend::list_optimizers() const {
  // Shared: a task that outlives a timed-out wait must not write to this frame.
  auto states = std::make_shared<std::vector<OptimizerState>>();
  run_and_wait([states](Engine& e) { *states = e.optimizer_states(); });
  Json out = Json::array();
  for (const OptimizerState& s : *states) {
    Json options = Json::object();
    for (const auto& [k, v] : s.spec.options) options[k] = option_json(v);
    Json counters = Json::object();
    for (const auto& c : s.counters) counters[c.name] = c.value;
    Json fallback = nullptr;
    if (s.fallback)
      fallback = {{"reason", fallback_reason_name(s.fallback->reason)}, {"detail", s.fallback->detail}};
    out.push_back({{"name", s.spec.name}, {"enabled", s.baseline || s.spec.enabled}, {"baseline", s.baseline},
                   {"options", options}, {"counters", counters}, {"seconds_total", s.seconds_total},
                   {"fallback", fallback}, {"rolled_back", s.rolled_back}});
  }
  return out;
}

Json EngineBackend::rollback_optimizers() {
  run_and_wait([](Engine& e) { e.rollback_optimizers("admin request"); });
  return {{"rolled_back", true}, {"data", list_optimizers()}};
}

Json EngineBackend::restore_optimizers() {
  run_and_wait([](Engine& e) { e.restore_optimizers(); });
  return {{"restored", true}, {"data", list_optimizers()}};
}

Json EngineBackend::config_status() const {
  std::lock_guard lock(specs_mutex_);
  return config_status_;
}

void EngineBackend::reload_config(const std::function<EngineConfig()>& load, const std::string& trigger) {
  auto diffs = [](const std::vector<SettingDiff>& list) {
    Json out = Json::array();
    for (const SettingDiff& d : list) out.push_back({{"key", d.key}, {"from", d.from}, {"to", d.to}});
    return out;
  };
  Json status;
  std::string result;
  std::optional<int64_t> version;
  try {
    const EngineConfig next = load();
    auto applied = std::make_shared<ConfigApplyReport>();
    run_and_wait([next, applied](Engine& e) { *applied = e.apply_config(next); });
    const ConfigApplyReport& report = *applied;
    result = report.applied.empty() ? "unchanged" : "applied";
    version = report.version;
    status = {{"result", result}, {"version", report.version}, {"applied", diffs(report.applied)},
              {"needs_restart", diffs(report.needs_restart)}};
    spdlog::info("configuration reload ({}): {}, version {}{}", trigger, result, report.version,
                 report.needs_restart.empty() ? "" : "; some changes need a restart");
    if (result == "applied") {
      {
        std::lock_guard lock(specs_mutex_);
        specs_ = next.optimizers;
      }
      update_priority_labels();
    }
  } catch (const std::exception& e) {
    result = "invalid";
    status = {{"result", result}, {"error", without_absolute_paths(e.what())}};
    spdlog::error("configuration reload ({}) rejected, nothing changed: {}", trigger, e.what());
  }
  status["trigger"] = trigger;
  status["at"] = unix_seconds();
  {
    std::lock_guard lock(specs_mutex_);
    if (version) config_status_["version"] = *version;
    config_status_["last_reload"] = std::move(status);
  }
  if (metrics::OptimizerMetrics* m = optimizer_metrics_.load()) {
    m->record_config_reload(result);
    if (version) m->set_config_version(*version);
  }
}

Json EngineBackend::update_optimizer(const std::string& name, const Json& body) {
  if (!body.is_object()) bad_request("", "the body must be a JSON object");
  const auto registry = optim::OptimizerRegistry::with_builtin();
  if (!registry.contains(name))
    throw ApiError(404, fmt::format("There is no optimizer `{}`; the optimizers are: {}.", name,
                                    fmt::join(registry.names(), ", ")));
  OptimizerSpec spec{name, {}, true};
  {
    std::lock_guard lock(specs_mutex_);
    for (const auto& s : specs_)
      if (s.name == name) spec = s;
  }
  if (body.contains("enabled")) {
    if (!body["enabled"].is_boolean()) bad_request("enabled", "enabled must be a boolean");
    spec.enabled = body["enabled"].get<bool>();
    for (const optim::PolicySlotInfo& slot : optim::kPolicySlots)
      if (!spec.enabled && slot.baseline == name)
        bad_request("enabled", "`{}` is the baseline of the {} slot: it runs whenever no optimizer takes the slot, "
                    "so it cannot be disabled; enable an optimizer of that slot instead, or roll every optimizer "
                    "back with POST /v1/optimizers/rollback", name, slot.name);
  }
  if (body.contains("options")) {
    if (!body["options"].is_object()) bad_request("options", "options must be an object");
    for (const auto& [k, v] : body["options"].items()) spec.options[k] = option_value(k, v);
  }
  if (!spec.enabled) {
    // The engine builds only enabled optimizers; options stored while disabled must be valid
    // too, or enabling them later fails. The server's engines use the built-in registry.
    OptimizerSpec probe = spec;
    probe.enabled = true;
    registry.build(probe);
  }
  // An unknown name or bad option throws Error: 404 / 400.
  run_and_wait([spec](Engine& e) { e.set_optimizer(spec); });
  {
    std::lock_guard lock(specs_mutex_);
    std::erase_if(specs_, [&](const OptimizerSpec& s) { return s.name == name; });
    specs_.push_back(spec);
  }
  update_priority_labels();
  Json options = Json::object();
  for (const auto& [k, v] : spec.options) options[k] = option_json(v);
  return {{"name", spec.name}, {"enabled", spec.enabled}, {"options", options}};
}

}  // namespace optimate::server
