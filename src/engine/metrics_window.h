// The engine's recent past over a sliding window, for a controller (optim::WindowMetrics):
// arrivals, time to first token, time per output token of the sequences that finished, and
// steps. Events go into
// buckets of `bucket_ns`; a bucket older than the window is dropped whole, so the window
// slides without storing every event for ever. Engine time throughout (the injected clock).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/step_observer.h"
#include "optim/api/views.h"
#include "sched/request_output.h"

namespace optimate {

class MetricsWindow final : public StepObserver {
 public:
  MetricsWindow(int64_t window_ns, int64_t bucket_ns);

  int64_t window_ns() const { return window_ns_; }
  // A request of `num_seqs` sequences (n) arrived.
  void on_arrival(const std::string& request_id, int64_t num_seqs, int64_t arrival_ns, int64_t now_ns);
  // A step's outputs: first tokens (TTFT from the arrival), finished sequences (their TPOT).
  void on_output(const sched::RequestOutput& out, int64_t now_ns);
  void on_step(int64_t now_ns, int64_t step_ns, int64_t prompt_tokens, int64_t generated_tokens);
  // The step's time and tokens, then its outputs, at its end.
  void on_step(const StepRecord& step) override;

  optim::WindowMetrics snapshot(int64_t now_ns) const;

 private:
  struct Bucket {
    int64_t start_ns = 0;
    int64_t arrivals = 0;
    std::vector<double> ttft_ms;
    std::vector<double> tpot_ms;  // sequences that finished in the bucket
    std::vector<double> step_ms;
    int64_t busy_ns = 0;
    int64_t prompt_tokens = 0;
    int64_t generated_tokens = 0;
  };
  struct Live {  // a sequence still producing tokens
    int64_t first_token_ns = 0;
    int64_t num_tokens = 0;
  };

  Bucket& bucket(int64_t now_ns);

  int64_t window_ns_;
  int64_t bucket_ns_;
  int64_t first_event_ns_ = -1;
  std::deque<Bucket> buckets_;
  struct Pending {  // a request some of whose sequences have produced nothing yet
    int64_t arrival_ns = 0;
    int64_t num_unstarted = 0;
  };
  std::unordered_map<std::string, Pending> pending_;     // by request id
  std::unordered_map<std::string, Live> live_;           // "id#index" -> state
};

}  // namespace optimate
