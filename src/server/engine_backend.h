// The production GenerationBackend: the AsyncEngine with the model's tokenizer and chat
// template. Outputs are handed to each request's sink on the engine thread (no thread per
// request); every step also refreshes the scheduler gauges and step counters of /metrics.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "metrics/optimizer_metrics.h"
#include "metrics/serving_metrics.h"
#include "metrics/step_profile_metrics.h"
#include "server/generation_backend.h"
#include "structured/grammar_workers.h"
#include "tokenizer/tokenizer.h"

namespace optimate::structured {
class GrammarCompiler;
}

namespace optimate::server {

struct EngineBackendOptions {
  std::string served_model_name;  // empty: the model path's file name
  // Grammars compile in child processes started with this command (`optimate grammar-worker`),
  // killed after grammar_deadline_s (structured/grammar_workers.h); empty: in this process.
  std::vector<std::string> grammar_worker_command;
  double grammar_deadline_s = 10.0;
};

class EngineBackend final : public GenerationBackend {
 public:
  // `engine` must carry the model's tokenizer (create_optimized_engine attaches it). `metrics`
  // may be null, else it must outlive the backend.
  EngineBackend(Engine engine, EngineBackendOptions options, metrics::ServingMetrics* metrics);
  ~EngineBackend() override;

  const ModelInfo& model() const override { return info_; }
  std::vector<int32_t> tokenize(std::string_view text, bool add_special_tokens) const override;
  std::string detokenize(std::span<const int32_t> ids) const override;
  std::string token_string(int32_t id) const override;
  std::string render_chat(std::span<const ChatMessage> messages, bool add_generation_prompt,
                          const ChatRenderOptions& options = {}) const override;
  std::shared_ptr<const TokenConstraint> compile_grammar(const structured::GrammarSpec& spec) override;

  void submit(BackendRequest request, OutputSink sink) override;
  void abort(const std::string& request_id) override;

  bool healthy() const override { return engine_->running(); }
  LoadReport load() const override;
  int64_t num_waiting() const override;
  int64_t num_unfinished() const override { return num_live_.load(); }

  Json list_optimizers() const override;
  Json update_optimizer(const std::string& name, const Json& body) override;
  void reset_prefix_cache() override;
  Json rollback_optimizers() override;
  Json restore_optimizers() override;
  Json config_status() const override;

  // Exports the optimizers' series (time, fallbacks, configuration version); `metrics` must
  // outlive the backend. Set it before serving.
  void set_optimizer_metrics(metrics::OptimizerMetrics* metrics) { optimizer_metrics_ = metrics; }
  // Exports where the steps' time goes (metrics/step_profile_metrics.h); the same rules.
  void set_step_profile_metrics(metrics::StepProfileMetrics* metrics) { step_profile_metrics_ = metrics; }
  // Reads the configuration with `load` and applies it between steps (hot settings and
  // optimizers; settings that need a restart are reported). An invalid configuration changes
  // nothing; either way the result is logged, counted and shown by config_status().
  // `trigger` says why ("SIGHUP", "file changed").
  void reload_config(const std::function<EngineConfig()>& load, const std::string& trigger);

  // kDrain: let submitted requests finish; kAbort: end them now. Blocks until the engine
  // thread has stopped.
  void shutdown(ShutdownMode mode) { engine_->shutdown(mode); }
  EngineStats stats() const { return engine_->stats(); }

 private:
  struct Live;
  void on_stats(const EngineStats& stats);
  // Tells /metrics how to name priorities: the priority optimizer's levels while it is on.
  void update_priority_labels();
  // Runs `task` on the engine thread and waits for it (503 if the engine does not answer).
  void run_and_wait(std::function<void(Engine&)> task) const;

  EngineBackendOptions options_;
  metrics::ServingMetrics* metrics_;
  // Set after the engine thread has started, which reads them after every step.
  std::atomic<metrics::OptimizerMetrics*> optimizer_metrics_{nullptr};
  std::atomic<metrics::StepProfileMetrics*> step_profile_metrics_{nullptr};
  ModelInfo info_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;  // absent: the model has none (chat requests fail)
  std::string chat_template_error_;
  std::vector<int64_t> eos_token_ids_;
  std::mutex grammar_mutex_;
  structured::Vocabulary grammar_vocabulary_;
  std::unique_ptr<structured::GrammarCompiler> grammar_compiler_;  // built on first use
  std::unique_ptr<structured::GrammarWorkers> grammar_workers_;    // with a worker command
  std::atomic<int64_t> num_live_{0};
  std::atomic<int64_t> unscheduled_tokens_{0};  // prompts of sequences yet to produce an output
  mutable std::mutex specs_mutex_;
  std::vector<OptimizerSpec> specs_;  // as configured, then as changed through the API
  EngineStats last_stats_;             // engine thread only
  Json config_status_;                 // under specs_mutex_
  std::unique_ptr<AsyncEngine> engine_;
};

}  // namespace optimate::server
