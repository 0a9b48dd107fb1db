#include "metrics/serving_metrics.h"

#include <algorithm>

namespace optimate::metrics {

namespace {

const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                  0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                  7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kRequestLatencyBuckets = {0.3,  0.5,  0.8,  1.0,   1.5,   2.0,  2.5,
                                                    5.0,  10.0, 15.0, 20.0,  30.0,  40.0, 50.0,
                                                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
                                                    7680.0};
const std::vector<double> kIterationTokenBuckets = {1,   8,    16,   32,   64,   128,  256,
                                                    512, 1024, 2048, 4096, 8192, 16384};
const std::vector<double> kBatchSizeBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};

const std::vector<std::string> kModel = {"model_name"};

std::vector<std::string> with(std::vector<std::string> labels, std::string extra) {
  labels.push_back(std::move(extra));
  return labels;
}

}  // namespace

ServingMetrics::ServingMetrics(Registry& r, std::string model_name, int64_t max_model_len)
    : model_name_(std::move(model_name)),
      num_requests_running_(r.gauge("vllm:num_requests_running",
                                    "Number of requests in model execution batches.", kModel)
                                .labels(model_label())),
      num_requests_waiting_(r.gauge("vllm:num_requests_waiting",
                                    "Number of requests waiting to be processed.", kModel)
                                .labels(model_label())),
      kv_cache_usage_perc_(r.gauge("vllm:kv_cache_usage_perc",
                                   "KV-cache usage. 1 means 100 percent usage.", kModel)
                               .labels(model_label())),
      gpu_cache_usage_perc_(r.gauge("vllm:gpu_cache_usage_perc",
                                    "GPU KV-cache usage. 1 means 100 percent usage. "
                                    "DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
                                    kModel)
                                .labels(model_label())),
      num_preemptions_(r.counter("vllm:num_preemptions",
                                 "Cumulative number of preemption from the engine.", kModel)
                           .labels(model_label())),
      prompt_tokens_(r.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", kModel)
                         .labels(model_label())),
      generation_tokens_(r.counter("vllm:generation_tokens",
                                   "Number of generation tokens processed.", kModel)
                             .labels(model_label())),
      request_success_(r.counter("vllm:request_success",
                                 "Count of successfully processed requests.",
                                 with(kModel, "finished_reason"))),
      prefix_cache_queries_(
          r.counter("vllm:prefix_cache_queries",
                    "Prefix cache queries, in terms of number of queried tokens.", kModel)
              .labels(model_label())),
      prefix_cache_hits_(r.counter("vllm:prefix_cache_hits",
                                   "Prefix cache hits, in terms of number of cached tokens.",
                                   kModel)
                             .labels(model_label())),
      time_to_first_token_(r.histogram("vllm:time_to_first_token_seconds",
                                       "Histogram of time to first token in seconds.",
                                       kTtftBuckets, kModel)
                               .labels(model_label())),
      inter_token_latency_(r.histogram("vllm:inter_token_latency_seconds",
                                       "Histogram of inter-token latency in seconds.",
                                       kTokenLatencyBuckets, kModel)
                               .labels(model_label())),
      time_per_output_token_(r.histogram("vllm:time_per_output_token_seconds",
                                         "Histogram of time per output token in seconds.",
                                         kTokenLatencyBuckets, kModel)
                                 .labels(model_label())),
      e2e_request_latency_(r.histogram("vllm:e2e_request_latency_seconds",
                                       "Histogram of e2e request latency in seconds.",
                                       kRequestLatencyBuckets, kModel)
                               .labels(model_label())),
      request_queue_time_(r.histogram("vllm:request_queue_time_seconds",
                                      "Histogram of time spent in WAITING phase for request.",
                                      kRequestLatencyBuckets, kModel)
                              .labels(model_label())),
      request_inference_time_(r.histogram("vllm:request_inference_time_seconds",
                                          "Histogram of time spent in RUNNING phase for request.",
                                          kRequestLatencyBuckets, kModel)
                                  .labels(model_label())),
      request_prefill_time_(r.histogram("vllm:request_prefill_time_seconds",
                                        "Histogram of time spent in PREFILL phase for request.",
                                        kRequestLatencyBuckets, kModel)
                                .labels(model_label())),
      request_decode_time_(r.histogram("vllm:request_decode_time_seconds",
                                       "Histogram of time spent in DECODE phase for request.",
                                       kRequestLatencyBuckets, kModel)
                               .labels(model_label())),
      request_prompt_tokens_(r.histogram("vllm:request_prompt_tokens",
                                         "Number of prefill tokens processed.",
                                         buckets_1_2_5(static_cast<double>(max_model_len)), kModel)
                                 .labels(model_label())),
      request_generation_tokens_(r.histogram("vllm:request_generation_tokens",
                                             "Number of generation tokens processed.",
                                             buckets_1_2_5(static_cast<double>(max_model_len)),
                                             kModel)
                                     .labels(model_label())),
      request_params_n_(r.histogram("vllm:request_params_n",
                                    "Histogram of the n request parameter.", {1, 2, 5, 10, 20},
                                    kModel)
                            .labels(model_label())),
      request_params_max_tokens_(r.histogram("vllm:request_params_max_tokens",
                                             "Histogram of the max_tokens request parameter.",
                                             buckets_1_2_5(static_cast<double>(max_model_len)),
                                             kModel)
                                     .labels(model_label())),
      iteration_tokens_(r.histogram("vllm:iteration_tokens_total",
                                    "Histogram of number of tokens per engine_step.",
                                    kIterationTokenBuckets, kModel)
                            .labels(model_label())),
      waiting_by_priority_(r.gauge("optimate:num_requests_waiting_by_priority",
                                   "Requests waiting to be scheduled, per priority level.",
                                   with(kModel, "priority"))),
      queue_time_by_priority_(r.histogram("optimate:request_queue_time_by_priority_seconds",
                                          "Time spent waiting before first scheduling, per "
                                          "priority level.",
                                          kRequestLatencyBuckets, with(kModel, "priority"))),
      batch_size_(r.histogram("optimate:batch_size", "Sequences per engine step.",
                              kBatchSizeBuckets, kModel)
                      .labels(model_label())),
      kv_used_blocks_(r.gauge("optimate:kv_cache_used_blocks", "KV-cache blocks in use.", kModel)
                          .labels(model_label())),
      kv_total_blocks_(r.gauge("optimate:kv_cache_total_blocks", "KV-cache blocks in the pool.",
                               kModel)
                           .labels(model_label())),
      kv_blocks_by_precision_(r.gauge("optimate:kv_cache_blocks",
                                      "KV-cache blocks in use, per storage precision.",
                                      with(kModel, "precision"))),
      kv_capacity_tokens_(r.gauge("optimate:kv_cache_capacity_tokens",
                                  "Tokens the empty KV cache holds at its default precision.", kModel)
                              .labels(model_label())),
      optimizer_counters_(r.gauge("optimate:optimizer_counter",
                                  "An optimizer's own counters and estimates (GET /v1/optimizers has them too).",
                                  with(with(kModel, "optimizer"), "counter"))),
      kv_requantized_blocks_(r.counter("optimate:kv_requantized_blocks",
                                       "KV-cache blocks converted to another precision.",
                                       with(with(kModel, "from"), "to"))),
      host_prefix_cache_queries_(r.counter("optimate:host_prefix_cache_queries",
                                           "Host-tier prefix cache queries, in terms of number of queried tokens "
                                           "(those the device tier missed).",
                                           kModel)
                                     .labels(model_label())),
      host_prefix_cache_hits_(r.counter("optimate:host_prefix_cache_hits",
                                        "Host-tier prefix cache hits, in terms of number of tokens restored "
                                        "from host memory.",
                                        kModel)
                                  .labels(model_label())),
      kv_swapped_out_blocks_(r.counter("optimate:kv_swapped_out_blocks",
                                       "KV-cache blocks of preempted requests copied to host memory.", kModel)
                                 .labels(model_label())),
      kv_swapped_in_blocks_(r.counter("optimate:kv_swapped_in_blocks",
                                      "KV-cache blocks copied back from host memory on readmission.", kModel)
                                .labels(model_label())),
      preemptions_by_mode_(r.counter("optimate:preemptions",
                                     "Preemptions by how the victim gave its KV back (recompute or swap) and why.",
                                     with(with(kModel, "mode"), "reason"))),
      host_swap_used_blocks_(r.gauge("optimate:host_kv_swap_used_blocks",
                                     "Host swap-space blocks holding preempted requests' KV.", kModel)
                                 .labels(model_label())),
      host_swap_total_blocks_(r.gauge("optimate:host_kv_swap_total_blocks", "Host swap-space blocks.", kModel)
                                  .labels(model_label())),
      host_prefix_cached_blocks_(r.gauge("optimate:host_prefix_cache_blocks",
                                         "Host prefix-cache blocks holding a cached prefix.", kModel)
                                     .labels(model_label())),
      host_prefix_total_blocks_(r.gauge("optimate:host_prefix_cache_total_blocks", "Host prefix-cache blocks.",
                                        kModel)
                                    .labels(model_label())),
      optimizer_events_(r.counter("optimate:optimizer_events",
                                  "Optimizer decisions, fallbacks and run-time changes.",
                                  with(with(kModel, "optimizer"), "event"))),
      rejected_requests_(r.counter("optimate:rejected_requests",
                                   "Requests refused before reaching the engine, by reason.",
                                   with(kModel, "reason"))),
      grammar_compiles_waiting_(r.gauge("optimate:grammar_compiles_waiting",
                                        "Structured outputs' grammars waiting for a compile thread.", kModel)
                                    .labels(model_label())),
      grammar_compiles_running_(r.gauge("optimate:grammar_compiles_running",
                                        "Structured outputs' grammars being compiled.", kModel)
                                    .labels(model_label())) {
  // Export every finish reason from the start so rate() works before the first abort.
  for (const char* reason : {"stop", "length", "abort"}) request_success_.labels({model_name_, reason});
}

void ServingMetrics::set_scheduler_state(const SchedulerGauges& s) {
  num_requests_running_.set(static_cast<double>(s.num_running));
  num_requests_waiting_.set(static_cast<double>(s.num_waiting));
  double usage = s.kv_usage >= 0.0 ? s.kv_usage
                 : s.kv_total_blocks > 0
                     ? static_cast<double>(s.kv_used_blocks) / static_cast<double>(s.kv_total_blocks)
                     : 0.0;
  kv_capacity_tokens_.set(static_cast<double>(s.kv_capacity_tokens));
  for (const auto& [optimizer, counters] : s.optimizer_counters)
    for (const auto& [name, value] : counters) optimizer_counters_.labels({model_name_, optimizer, name}).set(value);
  kv_cache_usage_perc_.set(usage);
  gpu_cache_usage_perc_.set(usage);
  kv_used_blocks_.set(static_cast<double>(s.kv_used_blocks));
  kv_total_blocks_.set(static_cast<double>(s.kv_total_blocks));
  host_swap_used_blocks_.set(static_cast<double>(s.host_swap_used_blocks));
  host_swap_total_blocks_.set(static_cast<double>(s.host_swap_total_blocks));
  host_prefix_cached_blocks_.set(static_cast<double>(s.host_prefix_cached_blocks));
  host_prefix_total_blocks_.set(static_cast<double>(s.host_prefix_total_blocks));

  std::map<std::string, int64_t> waiting_by_label;
  for (const auto& [priority, count] : s.num_waiting_by_priority)
    waiting_by_label[priority_labels_.label(priority)] += count;
  std::lock_guard lock(seen_mutex_);
  for (const auto& [label, count] : waiting_by_label) seen_priorities_.insert(label);
  for (const auto& label : seen_priorities_) {
    auto it = waiting_by_label.find(label);
    waiting_by_priority_.labels({model_name_, label})
        .set(it == waiting_by_label.end() ? 0.0 : static_cast<double>(it->second));
  }
  for (const auto& [precision, blocks] : s.kv_blocks_by_precision) seen_precisions_.insert(precision);
  for (const auto& precision : seen_precisions_) {
    auto it = s.kv_blocks_by_precision.find(precision);
    kv_blocks_by_precision_.labels({model_name_, precision})
        .set(it == s.kv_blocks_by_precision.end() ? 0.0 : static_cast<double>(it->second));
  }
}

void ServingMetrics::record_step(const StepStats& step) {
  num_preemptions_.inc(static_cast<double>(step.num_preemptions));
  prompt_tokens_.inc(static_cast<double>(step.num_prompt_tokens));
  generation_tokens_.inc(static_cast<double>(step.num_generation_tokens));
  prefix_cache_queries_.inc(static_cast<double>(step.prefix_cache_queries));
  prefix_cache_hits_.inc(static_cast<double>(step.prefix_cache_hits));
  host_prefix_cache_queries_.inc(static_cast<double>(step.host_prefix_cache_queries));
  host_prefix_cache_hits_.inc(static_cast<double>(step.host_prefix_cache_hits));
  kv_swapped_out_blocks_.inc(static_cast<double>(step.kv_swapped_out_blocks));
  kv_swapped_in_blocks_.inc(static_cast<double>(step.kv_swapped_in_blocks));
  for (const auto& [mode, reasons] : step.preemptions_by_mode)
    for (const auto& [reason, count] : reasons)
      if (count > 0) preemptions_by_mode_.labels({model_name_, mode, reason}).inc(static_cast<double>(count));
  int64_t tokens = step.num_prompt_tokens + step.num_generation_tokens;
  if (tokens > 0) iteration_tokens_.observe(static_cast<double>(tokens));
  if (step.batch_size > 0) batch_size_.observe(static_cast<double>(step.batch_size));
}

void ServingMetrics::record_first_token(double ttft_s) { time_to_first_token_.observe(ttft_s); }
void ServingMetrics::record_inter_token(double itl_s) { inter_token_latency_.observe(itl_s); }
void ServingMetrics::record_time_per_output_token(double tpot_s) {
  time_per_output_token_.observe(tpot_s);
}

void ServingMetrics::record_finished(const FinishedRequestStats& r) {
  const bool known_reason = r.finish_reason == "stop" || r.finish_reason == "length" ||
                            r.finish_reason == "abort";
  request_success_.labels({model_name_, known_reason ? r.finish_reason : "other"}).inc();
  auto observe_if = [](Histogram& h, double v) {
    if (v >= 0) h.observe(v);
  };
  observe_if(e2e_request_latency_, r.e2e_s);
  observe_if(request_queue_time_, r.queue_s);
  observe_if(request_inference_time_, r.inference_s);
  observe_if(request_prefill_time_, r.prefill_s);
  observe_if(request_decode_time_, r.decode_s);
  if (r.queue_s >= 0)
    queue_time_by_priority_.labels({model_name_, priority_labels_.label(r.priority)}).observe(r.queue_s);
  request_prompt_tokens_.observe(static_cast<double>(r.num_prompt_tokens));
  request_generation_tokens_.observe(static_cast<double>(r.num_generation_tokens));
  request_params_n_.observe(static_cast<double>(r.n));
  request_params_max_tokens_.observe(static_cast<double>(r.max_tokens));
}

void ServingMetrics::set_grammar_compiles(int64_t waiting, int64_t running) {
  grammar_compiles_waiting_.set(static_cast<double>(waiting));
  grammar_compiles_running_.set(static_cast<double>(running));
}

void ServingMetrics::record_rejected(const std::string& reason) {
  rejected_requests_.labels({model_name_, reason}).inc();
}

void ServingMetrics::record_optimizer_event(const std::string& optimizer, const std::string& event) {
  optimizer_events_.labels({model_name_, optimizer, event}).inc();
}

void ServingMetrics::record_kv_requantized(const std::string& from_precision,
                                           const std::string& to_precision, int64_t num_blocks) {
  kv_requantized_blocks_.labels({model_name_, from_precision, to_precision})
      .inc(static_cast<double>(num_blocks));
}

}  // namespace optimate::metrics
