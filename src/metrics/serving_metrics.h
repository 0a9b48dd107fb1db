// The series a serving process exports: vLLM v1's names and buckets (so routers, autoscalers
// and dashboards built for vLLM read Optimate unchanged) plus Optimate's own `optimate:*`
// series for what vLLM has no name for (per-priority queues, KV precision mix, optimizers).
//
// The engine side fills plain structs (one per step, one per finished request, one snapshot of
// the scheduler at scrape time); this class turns them into metric updates.
//
// Every label value comes from a bounded set: the model name and the finish reasons, precisions
// and optimizer names the engine defines, and priorities mapped by PriorityLabels. Nothing a
// client sends becomes a label value as sent.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "metrics/priority_labels.h"
#include "metrics/registry.h"

namespace optimate::metrics {

// Scheduler and KV state, read when /metrics is scraped: the part of the scheduler's snapshot
// (sched::SchedulerSnapshot) that /metrics exports as gauges; this module sits below the
// scheduler, so the server and the vLLM plugin fill it.
struct SchedulerGauges {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  std::map<EnginePriority, int64_t> num_waiting_by_priority;  // sequences per priority
  int64_t kv_used_blocks = 0;
  int64_t kv_total_blocks = 0;
  std::map<std::string, int64_t> kv_blocks_by_precision;  // "bf16", "int8", "int4" -> blocks in use
  double kv_usage = -1.0;        // share of the cache's bytes in use; < 0: from the block counts
  int64_t kv_capacity_tokens = 0;
  // Each optimizer's own counters (names the engine defines), exported as gauges.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, double>>>> optimizer_counters;
  // The host tier: the swap region's blocks in use and in all, and the host prefix cache's
  // blocks holding a prefix and in all (0 and 0 without one).
  int64_t host_swap_used_blocks = 0;
  int64_t host_swap_total_blocks = 0;
  int64_t host_prefix_cached_blocks = 0;
  int64_t host_prefix_total_blocks = 0;
};

// What one engine step did.
struct StepStats {
  int64_t batch_size = 0;  // sequences in the step
  int64_t num_prompt_tokens = 0;
  int64_t num_generation_tokens = 0;
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;  // tokens looked up
  int64_t prefix_cache_hits = 0;     // tokens found
  // The host tier of the prefix cache: tokens the device tier missed and looked up there, and
  // of those the tokens found (restored by a copy).
  int64_t host_prefix_cache_queries = 0;
  int64_t host_prefix_cache_hits = 0;
  int64_t kv_swapped_out_blocks = 0;
  int64_t kv_swapped_in_blocks = 0;
  // Preemptions by mode ("recompute", "swap") and reason (a fixed set of words).
  std::map<std::string, std::map<std::string, int64_t>> preemptions_by_mode;
};

// A request's life, recorded once when it finishes. Times in seconds; a negative time means
// the phase never happened (an aborted request that never got a token has no TTFT).
struct FinishedRequestStats {
  std::string finish_reason;  // "stop", "length" or "abort"
  EnginePriority priority;
  int64_t num_prompt_tokens = 0;
  int64_t num_generation_tokens = 0;
  int64_t max_tokens = 0;
  int64_t n = 1;
  double queue_s = -1;
  double prefill_s = -1;
  double decode_s = -1;
  double inference_s = -1;
  double e2e_s = -1;
};

class ServingMetrics {
 public:
  ServingMetrics(Registry& registry, std::string model_name, int64_t max_model_len);

  // The rule that names priorities in the per-priority series (default: fixed_priority_labeler
  // of higher-first clients).
  void set_priority_labeler(PriorityLabeler labeler) { priority_labels_.set_labeler(std::move(labeler)); }

  void set_scheduler_state(const SchedulerGauges& snapshot);
  void record_step(const StepStats& step);
  void record_first_token(double ttft_s);
  void record_inter_token(double itl_s);
  void record_finished(const FinishedRequestStats& request);
  void record_time_per_output_token(double tpot_s);

  // Front-end events: requests refused before reaching the engine, by reason
  // ("queue_full", "invalid", "unauthorized", "too_large", "timeout").
  void record_rejected(const std::string& reason);
  // Optimizer activity: decisions, fallbacks, enable/disable from the admin API.
  void record_optimizer_event(const std::string& optimizer, const std::string& event);
  void record_kv_requantized(const std::string& from_precision, const std::string& to_precision,
                             int64_t num_blocks);
  // Structured outputs' grammars waiting for a compile thread, and compiling now.
  void set_grammar_compiles(int64_t waiting, int64_t running);

 private:
  std::vector<std::string> model_label() const { return {model_name_}; }

  std::string model_name_;
  // vLLM gauges
  Gauge& num_requests_running_;
  Gauge& num_requests_waiting_;
  Gauge& kv_cache_usage_perc_;
  Gauge& gpu_cache_usage_perc_;
  // vLLM counters
  Counter& num_preemptions_;
  Counter& prompt_tokens_;
  Counter& generation_tokens_;
  Family<Counter>& request_success_;
  Counter& prefix_cache_queries_;
  Counter& prefix_cache_hits_;
  // vLLM histograms
  Histogram& time_to_first_token_;
  Histogram& inter_token_latency_;
  Histogram& time_per_output_token_;
  Histogram& e2e_request_latency_;
  Histogram& request_queue_time_;
  Histogram& request_inference_time_;
  Histogram& request_prefill_time_;
  Histogram& request_decode_time_;
  Histogram& request_prompt_tokens_;
  Histogram& request_generation_tokens_;
  Histogram& request_params_n_;
  Histogram& request_params_max_tokens_;
  Histogram& iteration_tokens_;
  // optimate:*
  Family<Gauge>& waiting_by_priority_;
  Family<Histogram>& queue_time_by_priority_;
  Histogram& batch_size_;
  Gauge& kv_used_blocks_;
  Gauge& kv_total_blocks_;
  Family<Gauge>& kv_blocks_by_precision_;
  Gauge& kv_capacity_tokens_;
  Family<Gauge>& optimizer_counters_;
  Family<Counter>& kv_requantized_blocks_;
  Counter& host_prefix_cache_queries_;
  Counter& host_prefix_cache_hits_;
  Counter& kv_swapped_out_blocks_;
  Counter& kv_swapped_in_blocks_;
  Family<Counter>& preemptions_by_mode_;
  Gauge& host_swap_used_blocks_;
  Gauge& host_swap_total_blocks_;
  Gauge& host_prefix_cached_blocks_;
  Gauge& host_prefix_total_blocks_;
  Family<Counter>& optimizer_events_;
  Family<Counter>& rejected_requests_;
  Gauge& grammar_compiles_waiting_;
  Gauge& grammar_compiles_running_;

  PriorityLabels priority_labels_;
  std::mutex seen_mutex_;
  // Label values once exported keep being exported (at 0) so a series never just vanishes.
  std::set<std::string> seen_priorities_;
  std::set<std::string> seen_precisions_;
};

}  // namespace optimate::metrics
