// An AsyncEngine (the engine on its own thread, as the HTTP server runs it) for the Python
// package's asyncio engine. Outputs reach Python through callbacks run on the engine thread
// (which take the GIL); every wait on the engine thread releases the GIL, so a Python policy
// or callback can never deadlock against it.
#pragma once

#include <memory>
#include <string>

#include <nanobind/nanobind.h>

#include "engine/async_engine.h"
#include "engine_handle.h"

namespace optimate::python {

class AsyncHandle {
 public:
  explicit AsyncHandle(EngineHandle& engine);
  ~AsyncHandle();

  // on_output(RequestOutput) for each output, on_error(message, code) if the request fails
  // after submission; both run on the engine thread and must be quick.
  void submit(const std::string& request_id, const std::vector<int32_t>& prompt_ids,
              const SamplingParams& params, const RequestMetadata& metadata, nb::object on_output,
              nb::object on_error);
  void abort(const std::string& request_id);
  PriorityOrder priority_order() const { return priority_order_; }
  void set_optimizer(const OptimizerSpec& spec);
  std::vector<OptimizerState> optimizer_states();
  EngineStats stats() const { return engine_->stats(); }
  // As vLLM's AsyncLLM.is_running: false from shutdown() on, and after a failed step.
  bool running() const { return engine_->running() && !engine_->shutting_down(); }
  // Drains (or aborts) every request and stops the thread.
  void shutdown(bool drain);

 private:
  template <typename T>
  T run_on_engine(std::function<T(Engine&)> task);

  PriorityOrder priority_order_;
  std::unique_ptr<AsyncEngine> engine_;
};

}  // namespace optimate::python
