#include "engine_handle.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "core/error.h"
#include "engine/engine_stats.h"
#include "engine/tokenizer_codec.h"
#include "engine_settings.h"

namespace optimate::python {
namespace {

template <typename T>
T attr(nb::handle object, const char* name) {
  nb::object value = object.attr(name);
  try {
    return nb::cast<T>(value);
  } catch (const nb::cast_error&) {
    fail(ErrorCode::kInvalidArgument, "SamplingParams.{} has the wrong type ({})", name,
         nb::cast<std::string>(nb::str(value.type().attr("__name__"))));
  }
}

[[noreturn]] void refuse_while_stepped() {
  fail(ErrorCode::kResourceExhausted, "LLMEngine is not thread-safe and another thread is stepping it: call it from "
       "one thread, or use AsyncLLMEngine");
}

}  // namespace

SamplingParams sampling_params_from(nb::handle p) {
  SamplingParams s;
  s.n = attr<int64_t>(p, "n");
  s.max_tokens = attr<int64_t>(p, "max_tokens");
  s.min_tokens = attr<int64_t>(p, "min_tokens");
  s.temperature = attr<float>(p, "temperature");
  s.top_p = attr<float>(p, "top_p");
  s.top_k = attr<int64_t>(p, "top_k");
  s.min_p = attr<float>(p, "min_p");
  s.repetition_penalty = attr<float>(p, "repetition_penalty");
  s.presence_penalty = attr<float>(p, "presence_penalty");
  s.frequency_penalty = attr<float>(p, "frequency_penalty");
  if (auto seed = attr<std::optional<int64_t>>(p, "seed")) {
    if (*seed < 0) fail(ErrorCode::kInvalidArgument, "seed must be non-negative, got {}", *seed);
    s.seed = static_cast<uint64_t>(*seed);
  }
  s.ignore_eos = attr<bool>(p, "ignore_eos");
  s.stop = attr<std::vector<std::string>>(p, "stop");
  s.stop_token_ids = attr<std::vector<int64_t>>(p, "stop_token_ids");
  s.include_stop_str_in_output = attr<bool>(p, "include_stop_str_in_output");
  s.skip_special_tokens = attr<bool>(p, "skip_special_tokens");
  s.spaces_between_special_tokens = attr<bool>(p, "spaces_between_special_tokens");
  s.logprobs = attr<std::optional<int64_t>>(p, "logprobs");
  s.validate();
  return s;
}

EngineHandle::EngineHandle(const OptionMap& settings, const std::vector<OptimizerSpec>& optimizers,
                           const std::vector<PythonPolicySpec>& python_policies, bool async_mode)
    : failures_(std::make_shared<PolicyFailures>(async_mode)) {
  EngineArgs args = engine_config_from_settings(settings);
  for (const auto& spec : optimizers) {
    std::erase_if(args.optimizers, [&](const OptimizerSpec& o) { return o.name == spec.name; });
    args.optimizers.push_back(spec);
  }
  args.validate();
  EngineParts parts;
  {
    nb::gil_scoped_release release;  // loading a model takes a while
    parts = create_engine_parts(args);
  }
  for (const auto& p : python_policies) {
    if (parts.registry.contains(p.name))
      fail(ErrorCode::kInvalidArgument, "Python policy '{}': the engine already has an optimizer of that name", p.name);
    const PythonPolicyKind kind = p.kind == "queue" ? PythonPolicyKind::kQueue : PythonPolicyKind::kBatch;
    auto object = std::make_shared<PyRef>(p.policy);
    parts.registry.register_optimizer(
        p.name, "a policy written in Python",
        [name = p.name, kind, object, failures = failures_](optim::OptionReader&) {
          return make_python_policy_set(name, kind, object, failures);
        });
  }
  if (const auto* codec = dynamic_cast<const TokenizerCodec*>(parts.codec.get())) tokenizer_ = codec->tokenizer();
  description_ = parts.description;
  vocab_size_ = parts.runner->config().vocab_size;
  engine_.emplace(std::move(args), std::move(parts));
  max_model_len_ = engine_->limits().max_model_len;
  num_kv_blocks_ = engine_->stats().kv_total_blocks;
  priority_order_ = engine_->config().priority_order;
}

void EngineHandle::check_not_stepped_elsewhere() const {
  const std::thread::id stepper = stepping_.load();
  if (stepper != std::thread::id{} && stepper != std::this_thread::get_id()) refuse_while_stepped();
}

Engine& EngineHandle::engine() {
  if (!engine_) fail(ErrorCode::kInvalidArgument, "this engine was handed to an AsyncLLMEngine");
  check_not_stepped_elsewhere();
  return *engine_;
}

const Engine& EngineHandle::engine() const {
  if (!engine_) fail(ErrorCode::kInvalidArgument, "this engine was handed to an AsyncLLMEngine");
  check_not_stepped_elsewhere();
  return *engine_;
}

const Tokenizer& EngineHandle::tokenizer() const {
  if (!tokenizer_) fail(ErrorCode::kInvalidArgument, "this engine has no tokenizer: send token ids");
  return *tokenizer_;
}

std::vector<int32_t> EngineHandle::encode(const std::string& text) const {
  return tokenizer().encode(text, /*add_special_tokens=*/true);
}

std::pair<std::string, std::vector<int32_t>> EngineHandle::chat_prompt(
    const std::vector<std::pair<std::string, std::string>>& messages, bool add_generation_prompt) const {
  std::vector<ChatMessage> chat;
  for (const auto& [role, content] : messages) chat.push_back({role, content});
  std::string text = tokenizer().chat_template().render(chat, add_generation_prompt);
  // The template writes BOS itself.
  std::vector<int32_t> ids = tokenizer().encode(text, /*add_special_tokens=*/false);
  return {std::move(text), std::move(ids)};
}

void EngineHandle::add_request(const std::string& request_id, const std::vector<int32_t>& prompt_ids,
                               const SamplingParams& params, const RequestMetadata& metadata) {
  engine().add_request(request_id, prompt_ids, params, metadata);
}

std::vector<sched::RequestOutput> EngineHandle::step() {
  Engine& e = engine();
  std::thread::id idle{};
  if (!stepping_.compare_exchange_strong(idle, std::this_thread::get_id())) refuse_while_stepped();
  struct Done {
    std::atomic<std::thread::id>& flag;
    ~Done() { flag.store(std::thread::id{}); }
  } done{stepping_};
  nb::gil_scoped_release release;
  return e.step();
}

bool EngineHandle::abort(const std::string& request_id) { return engine().abort(request_id); }

bool EngineHandle::has_unfinished() const { return engine().has_unfinished(); }

void EngineHandle::set_optimizer(const OptimizerSpec& spec) { engine().set_optimizer(spec); }

EngineStats EngineHandle::stats() const { return engine().stats(); }

Engine EngineHandle::release() {
  Engine e = std::move(engine());
  engine_.reset();
  return e;
}

}  // namespace optimate::python
