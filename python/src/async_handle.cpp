#include "async_handle.h"

#include <future>

#include <nanobind/stl/string.h>

#include "core/error.h"

namespace optimate::python {

AsyncHandle::AsyncHandle(EngineHandle& engine)
    : priority_order_(engine.priority_order()), engine_(std::make_unique<AsyncEngine>(engine.release())) {}

AsyncHandle::~AsyncHandle() {
  // The engine thread may be waiting for the GIL (a callback, a Python policy).
  nb::gil_scoped_release release;
  engine_.reset();
}

void AsyncHandle::submit(const std::string& request_id, const std::vector<int32_t>& prompt_ids,
                         const SamplingParams& params, const RequestMetadata& metadata, nb::object on_output,
                         nb::object on_error) {
  auto output_cb = std::make_shared<PyRef>(std::move(on_output));
  auto error_cb = std::make_shared<PyRef>(std::move(on_error));
  RequestListener listener;
  listener.on_output = [output_cb](RequestOutput out) {
    if (!nb::is_alive()) return;  // the interpreter has shut down: nobody is listening
    nb::gil_scoped_acquire gil;
    try {
      output_cb->get()(nb::cast(std::move(out)));
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("optimate: delivering an output to asyncio");
    }
  };
  listener.on_error = [error_cb](const Error& error) {
    if (!nb::is_alive()) return;
    nb::gil_scoped_acquire gil;
    try {
      error_cb->get()(std::string(error.what()), std::string(error_code_name(error.code())));
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("optimate: delivering an error to asyncio");
    }
  };
  engine_->submit(request_id, prompt_ids, params, metadata, std::move(listener));
}

void AsyncHandle::abort(const std::string& request_id) { engine_->abort(request_id); }

template <typename T>
T AsyncHandle::run_on_engine(std::function<T(Engine&)> task) {
  nb::gil_scoped_release release;
  auto done = std::make_shared<std::promise<T>>();
  std::future<T> result = done->get_future();
  engine_->run_on_engine([done, task = std::move(task)](Engine& e) {
    try {
      if constexpr (std::is_void_v<T>) {
        task(e);
        done->set_value();
      } else {
        done->set_value(task(e));
      }
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  try {
    return result.get();
  } catch (const std::future_error&) {  // the engine stopped before running the task
    fail(ErrorCode::kResourceExhausted, "the engine has stopped");
  }
}

void AsyncHandle::set_optimizer(const OptimizerSpec& spec) {
  run_on_engine<void>([spec](Engine& e) { e.set_optimizer(spec); });
}

std::vector<OptimizerState> AsyncHandle::optimizer_states() {
  return run_on_engine<std::vector<OptimizerState>>([](Engine& e) { return e.optimizer_states(); });
}

void AsyncHandle::shutdown(bool drain) {
  nb::gil_scoped_release release;
  engine_->shutdown(drain ? ShutdownMode::kDrain : ShutdownMode::kAbort);
}

}  // namespace optimate::python
