// An Engine on its own thread. submit() and abort() may be called from any thread; each
// request's outputs arrive on its own stream. Requests and aborts are applied between steps.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_stats.h"

namespace optimate {

// Receives a request's outputs on the engine thread as they are produced, instead of next():
// for callers that must not block a thread per request (the HTTP server). Both functions must
// be quick, must not block and must not call back into the AsyncEngine; on_error is called once
// if the request fails after submission.
struct RequestListener {
  std::function<void(RequestOutput)> on_output;
  std::function<void(const Error&)> on_error;
};

// The outputs of one request, in order; closed after the last sequence finishes.
class RequestStream {
 public:
  explicit RequestStream(int64_t num_seqs, RequestListener listener = {})
      : num_unfinished_(num_seqs), listener_(std::move(listener)) {}
  // Blocks until an output is ready; nullopt once the stream is closed and drained. Throws the
  // engine's Error if the request failed after submission (e.g. its prompt was too long).
  std::optional<RequestOutput> next();
  bool finished() const;

 private:
  friend class AsyncEngine;
  void push(RequestOutput out);
  void set_error(const std::string& message, ErrorCode code);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  int64_t num_unfinished_;
  std::optional<Error> error_;
  RequestListener listener_;  // when set, outputs bypass the queue
};

enum class ShutdownMode { kDrain, kAbort };

class AsyncEngine {
 public:
  explicit AsyncEngine(Engine engine);
  ~AsyncEngine();  // shutdown(kAbort)
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Duplicate ids, bad params and submissions after shutdown throw here; errors found by the
  // engine thread arrive through the stream.
  std::shared_ptr<RequestStream> submit(const std::string& request_id,
                                        std::variant<std::string, std::vector<int32_t>> prompt,
                                        const SamplingParams& params,
                                        const RequestMetadata& metadata = {});
  // As above, outputs going to `listener` on the engine thread (the stream's next() stays empty).
  std::shared_ptr<RequestStream> submit(const std::string& request_id,
                                        std::variant<std::string, std::vector<int32_t>> prompt,
                                        const SamplingParams& params, const RequestMetadata& metadata,
                                        RequestListener listener);
  void abort(const std::string& request_id);
  // Runs `task` on the engine thread between steps (optimizer changes, counters). Dropped,
  // unrun, if the engine stops first.
  void run_on_engine(std::function<void(Engine&)> task);
  // Called on the engine thread with a fresh snapshot after every step (and after requests are
  // added or aborted); must be quick. Set it before submitting requests.
  void set_stats_listener(std::function<void(const EngineStats&)> listener);
  // The snapshot taken after the latest step.
  EngineStats stats() const;
  // False once a step has failed and the engine thread has stopped.
  bool running() const;
  // True from shutdown() on (and after a failed step): no more requests are taken.
  bool shutting_down() const;
  // kDrain: finish every submitted request, then stop; kAbort: abort them all. Idempotent.
  void shutdown(ShutdownMode mode = ShutdownMode::kDrain);

 private:
  struct Submit {
    std::string id;
    std::variant<std::string, std::vector<int32_t>> prompt;
    SamplingParams params;
    RequestMetadata metadata;
  };
  void run();
  using Task = std::function<void(Engine&)>;
  using Command = std::variant<Submit, std::string, Task>;  // a Submit, an id to abort, a task
  void apply(std::deque<Command>& commands);
  void run_task(const Task& task);
  void publish_stats();

  Engine engine_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> commands_;
  std::unordered_map<std::string, std::shared_ptr<RequestStream>> streams_;
  bool stopping_ = false;
  ShutdownMode mode_ = ShutdownMode::kDrain;
  bool failed_ = false;
  bool exited_ = false;  // the engine thread has returned: a task posted now would never run
  std::function<void(const EngineStats&)> stats_listener_;
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace optimate
