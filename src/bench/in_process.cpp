#include "bench/in_process.h"

#include "bench/step_profile_report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <queue>
#include <thread>
#include <unordered_map>

#include "bench/gpu_monitor.h"
#include "core/error.h"
#include "metrics/process_usage.h"

namespace optimate::bench {
namespace {

// The least a fake clock moves when the engine asks to be stepped again at once after a step
// that ran nothing: without it such an engine would spin at a frozen time.
constexpr int64_t kMinIdleJumpNs = 1'000'000;
// An engine that holds requests this long without running a step will never run them.
constexpr int64_t kStallLimitNs = 600'000'000'000;

int64_t preemptions(const EngineStats& s, const char* mode) {
  auto it = s.preemptions_by_mode.find(mode);
  if (it == s.preemptions_by_mode.end()) return 0;
  int64_t n = 0;
  for (const auto& [reason, count] : it->second) n += count;
  return n;
}

EngineTotals engine_totals(const EngineStats& a, const EngineStats& b) {
  EngineTotals t;
  t.prefix_queries_tokens = b.prefix_cache_queries - a.prefix_cache_queries;
  t.prefix_hits_tokens = b.prefix_cache_hits - a.prefix_cache_hits;
  t.host_prefix_queries_tokens = b.host_prefix_cache_queries - a.host_prefix_cache_queries;
  t.host_prefix_hits_tokens = b.host_prefix_cache_hits - a.host_prefix_cache_hits;
  t.recompute_preemptions = preemptions(b, "recompute") - preemptions(a, "recompute");
  t.swap_preemptions = preemptions(b, "swap") - preemptions(a, "swap");
  t.swapped_out_blocks = b.kv_swapped_out_blocks - a.kv_swapped_out_blocks;
  t.swapped_in_blocks = b.kv_swapped_in_blocks - a.kv_swapped_in_blocks;
  t.preempted_s = static_cast<double>(b.preempted_ns - a.preempted_ns) * 1e-9;
  return t;
}

}  // namespace

RunResult run_in_process(BuiltEngine& target, const Workload& workload, const ProgressFn& progress) {
  Engine& engine = *target.engine;
  const Clock& clock = *target.clock;
  const auto& requests = workload.requests;
  const bool closed_loop = workload.spec.arrival.kind == ArrivalKind::kClosedLoop;
  const int64_t concurrency = workload.spec.arrival.concurrency;
  const int64_t total = static_cast<int64_t>(requests.size());
  // Later turns of conversations (after the others) are sent when the turn before finished.
  const std::vector<int64_t> follower = followers(workload);
  const size_t first_turns = num_independent(workload);
  std::priority_queue<std::pair<int64_t, size_t>, std::vector<std::pair<int64_t, size_t>>, std::greater<>> ready;

  // Only a run on the GPU has GPU time to sample.
  const std::unique_ptr<GpuMonitor> gpu =
      target.device == "cuda" ? start_gpu_monitor()
      : std::make_unique<GpuMonitor>(nullptr, target.device == "sim" ? "simulated backend" : target.device + " backend");
  // The CPU time and peak memory of this process, which runs the model (not the simulator's).
  const bool host_measured = target.device != "sim" && metrics::reset_peak_resident();
  const std::optional<metrics::ProcessUsage> host_before = metrics::read_process_usage();
  const auto host_t0 = std::chrono::steady_clock::now();
  RunResult run;
  run.target = target.target;
  run.records.resize(requests.size());
  std::unordered_map<std::string, size_t> index;
  const int64_t t0_ns = clock.now_ns();
  auto now_s = [&] { return static_cast<double>(clock.now_ns() - t0_ns) * 1e-9; };
  // Arrivals compare in integer nanoseconds: a clock set to an arrival must reach it exactly.
  auto arrival_ns = [&](size_t i) { return t0_ns + std::llround(requests[i].arrival_s * 1e9); };
  int64_t last_progress_ns = t0_ns;
  // Request i is done: its next turn, if any, is sent after the think time.
  auto follow = [&](size_t i) {
    const int64_t j = follower[i];
    if (j >= 0) ready.emplace(clock.now_ns() + std::llround(requests[static_cast<size_t>(j)].think_s * 1e9), j);
  };

  size_t next = 0;
  int64_t in_flight = 0, done = 0;
  int64_t last_forward_count = target.observer ? target.observer->last().count : 0;
  int64_t last_copy_batches = target.observer ? target.observer->num_copy_batches() : 0;
  const EngineStats stats_before = engine.stats();

  auto send = [&](size_t i, double arrival_s) {
    const BenchRequest& br = requests[i];
    RequestRecord& rec = run.records[i];
    rec.id = br.id;
    rec.priority = br.priority;
    rec.priority_class = br.priority_class;
    rec.arrival_s = arrival_s;
    rec.prompt_tokens = br.prompt_len;
    rec.turn = br.turn;
    SamplingParams params;
    params.max_tokens = br.max_tokens;
    params.temperature = 0.0f;  // greedy: the same tokens in every configuration
    params.ignore_eos = workload.spec.ignore_eos;
    RequestMetadata meta;
    // The workload's priorities are a client's: converted here, as a server converts them.
    meta.priority = to_engine_priority(engine.config().priority_order, ClientPriority{br.priority});
    meta.arrival_ns = t0_ns + std::llround(arrival_s * 1e9);
    try {
      if (br.prompt_token_ids.empty()) engine.add_request(br.id, br.prompt_text, params, meta);
      else engine.add_request(br.id, br.prompt_token_ids, params, meta);
      index[br.id] = i;
      ++in_flight;
    } catch (const Error& e) {
      rec.success = false;
      rec.error = e.what();
      rec.finish_s = arrival_s;
      ++done;
      follow(i);
    }
  };

  while (done < total) {
    const double t = now_s();
    if (closed_loop) {
      while (in_flight < concurrency && next < first_turns) send(next++, t);
    } else {
      while (next < first_turns && arrival_ns(next) <= clock.now_ns()) {
        send(next, requests[next].arrival_s);
        ++next;
      }
    }
    while (!ready.empty() && ready.top().first <= clock.now_ns()) {
      const size_t i = ready.top().second;
      ready.pop();
      send(i, static_cast<double>(clock.now_ns() - t0_ns) * 1e-9);
    }
    bool progressed = false;
    if (engine.has_unfinished()) {
      std::vector<RequestOutput> outs = engine.step();
      const double after = now_s();
      if (target.observer && target.observer->last().count != last_forward_count) {
        last_forward_count = target.observer->last().count;
        const ForwardObservation& f = target.observer->last();
        const EngineStats m = engine.stats();
        run.steps.push_back({.t_s = after, .duration_s = f.duration_s, .batch_size = f.batch_size,
                             .num_tokens = f.num_tokens, .num_waiting = m.num_waiting,
                             .num_running = m.num_running, .kv_usage = m.kv_usage});
        progressed = true;
      }
      // A step that only copied blocks back from host memory runs them in the next one.
      if (target.observer && target.observer->num_copy_batches() != last_copy_batches) {
        last_copy_batches = target.observer->num_copy_batches();
        progressed = true;
      }
      for (const RequestOutput& o : outs) {
        auto it = index.find(o.request_id);
        if (it == index.end()) continue;
        RequestRecord& rec = run.records[it->second];
        // The engine measures queue time on its own clock from the arrival it was given.
        if (std::isnan(rec.scheduled_s) && o.queue_ns >= 0)
          rec.scheduled_s = rec.arrival_s + static_cast<double>(o.queue_ns) * 1e-9;
        if (!o.new_token_ids.empty() && std::isnan(rec.first_token_s)) rec.first_token_s = after;
        rec.token_times_s.insert(rec.token_times_s.end(), o.new_token_ids.size(), after);
        progressed = progressed || !o.new_token_ids.empty() || o.finished;
        if (!o.finished) continue;
        rec.finish_s = after;
        rec.output_tokens = o.usage.completion_tokens;
        rec.prompt_tokens = o.usage.prompt_tokens;
        rec.success = o.finish_reason != FinishReason::kAbort && !rec.token_times_s.empty();
        if (!rec.success) rec.error = "aborted";
        const size_t finished = it->second;
        index.erase(it);
        --in_flight;
        ++done;
        follow(finished);
      }
    }
    if (progress) progress(done, total, now_s());
    if (progressed || done >= total) {
      last_progress_ns = clock.now_ns();
      continue;
    }
    if (clock.now_ns() - last_progress_ns > kStallLimitNs && (closed_loop || next >= first_turns) && ready.empty())
      fail(ErrorCode::kInternal, "benchmark stalled: the engine ran no step for {:.0f} s with {} requests "
           "unfinished (a prompt larger than the KV cache?)", kStallLimitNs * 1e-9, total - done);

    // Nothing ran: wait for the next arrival, or until the engine says stepping is worth it
    // again (the batch policy holds requests back until then).
    int64_t wake_ns = INT64_MAX;
    if (!closed_loop && next < first_turns)
      wake_ns = arrival_ns(next);
    if (!ready.empty()) wake_ns = std::min(wake_ns, ready.top().first);
    if (engine.has_unfinished()) wake_ns = std::min(wake_ns, engine.idle_until_ns().value_or(clock.now_ns()));
    if (wake_ns == INT64_MAX)
      fail(ErrorCode::kInternal, "benchmark stalled: {} of {} requests finished and nothing is pending", done, total);
    if (target.fake_clock) {
      const int64_t now_ns = target.fake_clock->now_ns();
      target.fake_clock->set_ns(wake_ns > now_ns ? wake_ns : now_ns + kMinIdleJumpNs);
    } else {
      const int64_t wait_ns = wake_ns - clock.now_ns();
      if (wait_ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<int64_t>(wait_ns, 1'000'000)));
    }
  }
  const EngineStats after = engine.stats();
  run.num_preemptions = after.num_preemptions - stats_before.num_preemptions;
  run.engine = engine_totals(stats_before, after);
  run.step_profile = step_profile_delta(after.step_profile, stats_before.step_profile);
  run.gpu = gpu->stop();
  const std::optional<metrics::ProcessUsage> host_after = metrics::read_process_usage();
  if (target.device == "sim") {
    run.host.unavailable = "simulated backend";
  } else if (!host_measured || !host_before || !host_after) {
    run.host.unavailable = "the process's CPU time and peak memory cannot be read here (/proc/self)";
  } else {
    run.host.cpu_seconds = host_after->cpu_seconds - host_before->cpu_seconds;
    run.host.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_t0).count();
    run.host.num_cpus = host_after->num_cpus;
    run.host.peak_resident_bytes = host_after->peak_resident_bytes;
  }
  return run;
}

}  // namespace optimate::bench
