// The engine: one step() = schedule -> runner.forward -> sample -> update, then text deltas
// and stop strings, then the step's observers. With async_scheduling on a runner that launches
// steps without waiting (ModelRunner::launch_sample), step() plans and launches step N+1 before
// it waits for step N, whose tokens it then applies while N+1 runs: N+1's rows take N's tokens
// on the device. Which of the two step functions runs is chosen when the setting changes, not
// per step (engine_step.cpp). Not thread-safe; AsyncEngine runs one on its own thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runner/model_runner.h"
#include "config/config_diff.h"
#include "config/engine_config.h"
#include "core/clock.h"
#include "engine/decision_log.h"
#include "engine/engine_stats.h"
#include "engine/kernel_guard.h"
#include "engine/metrics_window.h"
#include "engine/optimizer_set.h"
#include "engine/output_processor.h"
#include "engine/prompt_logprobs_collector.h"
#include "engine/step_observer.h"
#include "engine/step_profile.h"
#include "engine/token_matchers.h"
#include "engine/text_codec.h"
#include "engine/throughput_guard.h"
#include "engine/trace_recorder.h"
#include "optim/registry.h"
#include "sampling/sampler.h"
#include "sched/scheduler.h"

namespace optimate {

using EngineArgs = EngineConfig;
using sched::FinishReason;
using sched::RequestOutput;

struct OptimizerCounters {
  std::string optimizer;
  std::vector<optim::PolicyCounter> counters;
};

struct EngineParts {
  std::unique_ptr<ModelRunner> runner;
  std::shared_ptr<const TextCodec> codec;  // null: token ids only (text prompts, stop strings refused)
  std::shared_ptr<const Clock> clock;      // null: the steady clock
  optim::OptimizerRegistry registry = optim::OptimizerRegistry::with_builtin();
  std::string description;                 // the backend and model, for logs and reports
  std::string device;                      // the backend resolved from --device: "cpu" or "cuda"
  // The policies' own time (optimizer overhead, the watchdog); null: the steady clock. Never
  // the engine clock of a simulation, where policies would take no time at all.
  std::shared_ptr<const Clock> policy_clock;
  // A cost model's step time, for the throughput guard; null: no guard.
  StepEstimator step_estimator;
  // Null: from config.decision_log / config.record_trace (none when those are empty).
  std::shared_ptr<DecisionLog> decisions;
  std::shared_ptr<TraceRecorder> trace;
};

// What applying a new configuration did (Engine::apply_config).
struct ConfigApplyReport {
  int64_t version = 0;                    // the active configuration's version afterwards
  std::vector<SettingDiff> applied;       // hot settings and optimizers, now in force
  std::vector<SettingDiff> needs_restart; // settings that only a restart changes (not applied)
};

// The sizes an engine runs with, as resolved from its settings and its runner.
struct EngineLimits {
  int64_t max_model_len = 0;  // context: prompt + generated tokens of one sequence
  int64_t num_kv_blocks = 0;
  int64_t block_size = 0;
  int64_t max_num_seqs = 0;            // the scheduler's current limits
  int64_t max_num_batched_tokens = 0;
  StepCapacity capacity;               // what the runner allocated: the limits' ceiling
};

class Engine {
 public:
  // config.optimizers are built from parts.registry; the KV pool has config.num_kv_blocks
  // blocks, which must match the runner's cache.
  Engine(EngineConfig config, EngineParts parts);
  Engine(Engine&&) noexcept;
  ~Engine();

  // Errors (kInvalidArgument): duplicate live id, bad params, empty or too long prompt.
  void add_request(const std::string& request_id, std::string_view prompt,
                   const SamplingParams& params, const RequestMetadata& metadata = {});
  void add_request(const std::string& request_id, std::vector<int32_t> prompt_ids,
                   const SamplingParams& params, const RequestMetadata& metadata = {});
  // Ends the request; its finished outputs (reason abort) come with the next step(). False
  // when the id is unknown or already finished.
  bool abort(const std::string& request_id);
  std::vector<RequestOutput> step();
  bool has_unfinished() const;
  // After a step() that ran nothing while requests wait (the batch policy held them back):
  // the engine-clock time when stepping again is worth it; nullopt when the last step ran.
  // New requests may be worth a step sooner.
  std::optional<int64_t> idle_until_ns() const { return idle_until_ns_; }

  EngineLimits limits() const;
  // Moves the scheduler's limits between steps; Error(kInvalidArgument) above what the runner
  // allocated (limits().capacity) or below 1, and nothing changes.
  void set_limits(int64_t max_num_seqs, int64_t max_num_batched_tokens);

  // Enables (building it if new) or disables an optimizer between steps; disabling falls back
  // to the baseline for the slots it filled. It becomes part of the last good configuration.
  void set_optimizer(const OptimizerSpec& spec);
  // Forgets every cached prefix between steps (after a model or tokenizer change, or on an
  // operator's request); running and waiting requests keep their blocks.
  void reset_prefix_cache() { scheduler_->reset_prefix_cache(); }
  std::vector<OptimizerCounters> optimizer_counters() const;
  // Every configured optimizer (enabled or not, fallen back or not) and the baselines in use.
  std::vector<OptimizerState> optimizer_states() const { return optimizers_->states(); }
  // Every optimizer back to the baseline, the limits and policy knobs to their configured
  // values (rollback); restore_optimizers() returns to the last good configuration.
  void rollback_optimizers(const std::string& reason);
  void restore_optimizers();

  // Validates `next` whole (settings, optimizers, limits within the runner's capacity) and
  // applies it between steps: hot settings and optimizers take effect, running requests go on;
  // settings that need a restart are reported, not applied. Error (nothing changes) when
  // `next` is invalid.
  ConfigApplyReport apply_config(const EngineConfig& next);
  int64_t config_version() const { return config_version_; }
  // The scheduler's state and totals, priorities in the clients' convention.
  EngineStats stats() const;

  const EngineConfig& config() const { return config_; }
  const sched::Scheduler& scheduler() const { return *scheduler_; }
  const ModelRunner& runner() const { return *runner_; }
  const Clock& clock() const { return *clock_; }
  // Null when the engine takes token ids only.
  const std::shared_ptr<const TextCodec>& codec() const { return codec_; }

 private:
  void apply_policies();
  // The kernels policy's choice onto the runner (engine_kernels.cpp); Error for a choice of
  // `specs` the runner cannot run.
  void apply_kernels();
  void check_kernels(const std::vector<OptimizerSpec>& specs) const;
  // An enabled optimizer that needs the KV cache laid out for quantized blocks (kv_quant) is
  // refused when this cache was not: its layout is fixed at start.
  void check_kv_layout(const std::vector<OptimizerSpec>& specs) const;
  // The step's forward pass and sampling; under a watched kernel variant that misbehaves, the
  // kernels optimizer falls back and the step runs again on the stable kernels.
  void run_step(const sched::StepPlan& plan, const ForwardBatch& batch, sched::StepResult& result);
  void run_once(const sched::StepPlan& plan, const ForwardBatch& batch, sched::StepResult& result);
  optim::BuildContext build_context() const;
  void apply_hot_settings();
  // Disables optimizers whose guards found a fault during the last step (engine_optimizers.cpp).
  void take_faults();
  void fall_back(const std::string& optimizer, FallbackReason reason, const std::string& detail);
  void record(DecisionRecord record) const;
  // schedule(), once more on the baselines when an optimizer's decision made it fail.
  sched::StepPlan schedule_guarded();
  void tick_controller();
  optim::MetricsView metrics_view() const;
  void apply_knob_changes(const optim::KnobChanges& changes);
  void reset_knobs();
  // After a step: every observer, then the fallback the throughput guard calls for
  // (engine_observe.cpp).
  void observe_step(const StepRecord& step);
  // What observes each step, after a change of policies (the window) or settings.
  void list_observers();
  void record_admissions(const sched::StepPlan& plan, int64_t schedule_ns);
  void record_requantize(const sched::StepPlan& plan);
  void sample(const sched::StepPlan& plan, sched::StepResult& result);
  // Grammar matchers and prompt logprobs, after the scheduler's update: advances the matchers
  // (ending a sequence whose grammar ended or refused its token) and attaches prompt logprobs.
  void finish_output(RequestOutput& out);
  // Runs the step on a runner that samples on the device; false (nothing run) when a row
  // needs the host sampler or the runner cannot.
  bool sample_on_device(const sched::StepPlan& plan, const ForwardBatch& batch,
                        sched::StepResult& result);
  // Fills specs_ with the plan's rows; false when a row needs the host sampler.
  bool device_specs(const sched::StepPlan& plan);
  // The runner's tokens (device_tokens_) as a step result.
  void take_device_tokens(sched::StepResult& result) const;

  // One step (engine_step.cpp). A step planned to run: the runner's batch views the plan's rows.
  struct PlannedStep {
    sched::StepPlan plan;
    ForwardBatch batch;
    double estimated_s = 0.0;  // the cost model's; 0 without one
  };
  // A step launched or run, until its tokens are applied.
  struct LaunchedStep {
    sched::StepPlan plan;
    const char* kind = "";
    double estimated_s = 0.0;
    int64_t start_ns = 0;
    int64_t prompt_tokens = 0;  // prompt tokens it computes (cached prefixes excluded)
  };
  // step_fn_ from async_scheduling, and from whether the runner launches ahead.
  void choose_step_fn();
  // The step functions, after step()'s faults and controller tick: false when the step ran
  // nothing. The synchronous one runs each step alone; the overlapped one launches a step
  // before it applies the one in flight, unless this step cannot overlap.
  bool step_sync(int64_t start_ns, std::vector<RequestOutput>& out);
  bool step_overlapped(int64_t start_ns, std::vector<RequestOutput>& out);
  // Schedules a step and hands the runner its requantize orders and copies; false when the
  // plan runs nothing (the step in flight, if any, then goes to `out`). `timed`: the step is to
  // be timed by stage.
  bool plan_step(bool timed, PlannedStep& step, std::vector<RequestOutput>& out);
  // Runs `step` with nothing in flight and applies its tokens.
  void run_alone(PlannedStep& step, int64_t start_ns, std::vector<RequestOutput>& out);
  // Launches `plan` on the runner (its pending tokens point at the step in flight's rows);
  // false, having launched nothing, when a row needs the host sampler or the runner cannot
  // launch ahead (the engine then turns synchronous for good).
  bool launch_overlapped(sched::StepPlan& plan, const ForwardBatch& batch);
  // The scheduler's advance past a launched or run step; returns the prompt tokens it computes.
  int64_t advance(const sched::StepPlan& plan);
  // Waits for the step in flight and applies its tokens; its outputs go to `out`.
  void finish_in_flight(std::vector<RequestOutput>& out);
  // Applies the tokens of `step`, its outputs to `out`, and has its observers see it. `end_ns`:
  // when the device finished it; none for a step run alone, which ends after its update.
  void finish_step(const LaunchedStep& step, const sched::StepResult& result, std::optional<int64_t> end_ns,
                   std::vector<RequestOutput>& out);
  // The scheduler's update has produced `o`: grammars, stop strings, the window's bookkeeping.
  void process_output(RequestOutput& o);
  void phase(const char* name);

  EngineConfig config_;
  std::unique_ptr<ModelRunner> runner_;
  std::shared_ptr<const TextCodec> codec_;
  std::shared_ptr<const Clock> clock_;
  std::shared_ptr<GuardContext> guard_;
  std::unique_ptr<OptimizerSet> optimizers_;
  std::unique_ptr<KernelGuard> kernels_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  std::unique_ptr<MetricsWindow> window_;  // while a controller runs
  StepEstimator step_estimator_;
  std::unique_ptr<ThroughputGuard> throughput_;  // with a step estimator
  std::shared_ptr<DecisionLog> decisions_;
  std::shared_ptr<TraceRecorder> trace_;
  int64_t config_version_ = 1;
  std::unique_ptr<OutputProcessor> outputs_;
  std::unique_ptr<sampling::Sampler> sampler_;
  TokenMatchers matchers_;                   // structured outputs' grammars, per sequence
  PromptLogprobsCollector prompt_logprobs_;
  std::vector<sampling::PositionLogprobs> position_logprobs_;
  std::vector<RequestOutput> pending_;  // aborts, reported by the next step()
  std::vector<float> logits_;
  std::vector<sampling::SampleInput> rows_;
  std::vector<sampling::SampleOutput> samples_;
  std::vector<SampleSpec> specs_;
  std::vector<int32_t> device_tokens_;
  std::unique_ptr<StepProfiler> profiler_;
  StepDeviceTimes device_times_;
  // Each step is handed to these, in order: the profiler, the window, the throughput guard.
  // Held elsewhere (and by address, so that they survive a move of the engine).
  std::vector<StepObserver*> observers_;
  std::optional<int64_t> last_step_end_ns_;  // when the last step left work to do
  int64_t phase_mark_ns_ = 0;                // where the current host phase began
  bool (Engine::*step_fn_)(int64_t start_ns, std::vector<RequestOutput>& out) = &Engine::step_sync;
  // The step launched and not yet collected (async_scheduling).
  std::optional<LaunchedStep> in_flight_;
  int64_t last_collect_ns_ = 0;
  bool runner_launches_ = true;  // false once the runner refused a launch_sample
  // Live requests whose rows may need the host sampler, by id: unfinished sequences. While
  // any is live, steps run one at a time.
  std::unordered_map<std::string, int64_t> host_sampled_;
  uint64_t next_seed_ = 0;
  int64_t next_tick_ns_ = 0;
  std::optional<int64_t> idle_until_ns_;
};

// Loads args.model (only its shape, for --load-format dummy) on the backend args.device
// picks (auto: the GPU when one is present), with the model's own tokenizer, so text prompts,
// text outputs and stop strings work. The sizes the backend decided (context, KV blocks,
// step capacity) are the runner's; the engine built from the parts reports them (limits()).
EngineParts create_engine_parts(const EngineArgs& args);

// create_engine_parts, with the baseline policies plus `optimizers`.
Engine create_optimized_engine(EngineArgs args, std::vector<OptimizerSpec> optimizers = {});

}  // namespace optimate
