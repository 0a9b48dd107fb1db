// The Python package's handle on one Engine: builds it from named settings, optimizer specs and
// Python policies, converts prompts and outputs, and releases the GIL while the engine works.
// An EngineHandle can give its Engine to an AsyncEngine (async_handle.h), after which every
// call on it is an error.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <nanobind/nanobind.h>

#include "engine/engine.h"
#include "engine/engine_stats.h"
#include "tokenizer/tokenizer.h"
#include "python_policies.h"

namespace optimate::python {

namespace nb = nanobind;

using Prompt = std::variant<std::string, std::vector<int32_t>>;

struct PythonPolicySpec {
  std::string name;
  std::string kind;  // "queue" or "batch"
  nb::object policy;
};

class EngineHandle {
 public:
  EngineHandle(const OptionMap& settings, const std::vector<OptimizerSpec>& optimizers,
               const std::vector<PythonPolicySpec>& python_policies, bool async_mode);

  // Prompt token ids as the engine encodes a text prompt (with the tokenizer's BOS rules).
  std::vector<int32_t> encode(const std::string& text) const;
  // A chat rendered with the model's template: (text, token ids).
  std::pair<std::string, std::vector<int32_t>> chat_prompt(
      const std::vector<std::pair<std::string, std::string>>& messages, bool add_generation_prompt) const;

  // `metadata` as request_metadata_from made it (the priority in the engine's order).
  void add_request(const std::string& request_id, const std::vector<int32_t>& prompt_ids,
                   const SamplingParams& params, const RequestMetadata& metadata);
  std::vector<sched::RequestOutput> step();
  bool abort(const std::string& request_id);
  bool has_unfinished() const;
  void set_optimizer(const OptimizerSpec& spec);
  std::vector<OptimizerState> optimizer_states() const { return engine().optimizer_states(); }
  EngineStats stats() const;
  nb::object take_policy_failure() { return failures_->take(); }

  int64_t max_model_len() const { return max_model_len_; }
  int64_t num_kv_blocks() const { return num_kv_blocks_; }
  int64_t vocab_size() const { return vocab_size_; }
  const std::string& description() const { return description_; }
  PriorityOrder priority_order() const { return priority_order_; }

  // Moves the engine out (to an AsyncEngine).
  Engine release();

 private:
  Engine& engine();
  const Engine& engine() const;
  const Tokenizer& tokenizer() const;
  // The engine is not thread-safe: while one thread steps it (the GIL released), a call from
  // another thread is refused with an error instead of corrupting it. Its own thread (a Python
  // policy the step calls) may still read it.
  void check_not_stepped_elsewhere() const;
  std::atomic<std::thread::id> stepping_{};

  std::shared_ptr<PolicyFailures> failures_;
  std::optional<Engine> engine_;
  std::shared_ptr<const Tokenizer> tokenizer_;  // null for a token-ids-only engine
  int64_t max_model_len_ = 0;
  int64_t num_kv_blocks_ = 0;
  int64_t vocab_size_ = 0;
  std::string description_;
  PriorityOrder priority_order_ = PriorityOrder::kHigherFirst;
};

// SamplingParams from the Python SamplingParams (attributes of the same names); validated.
SamplingParams sampling_params_from(nb::handle params);

}  // namespace optimate::python
