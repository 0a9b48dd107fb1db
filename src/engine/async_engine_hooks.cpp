// AsyncEngine's side doors for a server: tasks run between steps and a stats snapshot published
// after each step, so callers on other threads never touch the Engine itself.
#include "core/logging.h"
#include "engine/async_engine.h"

namespace optimate {

void AsyncEngine::run_on_engine(std::function<void(Engine&)> task) {
  {
    std::lock_guard lock(mu_);
    if (failed_) fail(ErrorCode::kInternal, "the engine has stopped after a failed step");
    if (exited_) fail(ErrorCode::kResourceExhausted, "the engine is shut down");
    commands_.push_back(Task(std::move(task)));
  }
  cv_.notify_all();
}

void AsyncEngine::run_task(const Task& task) {
  // A task is the caller's code: its failure is reported, never allowed to stop the engine.
  try {
    task(engine_);
  } catch (const std::exception& e) {
    spdlog::error("engine task failed: {}", e.what());
  }
}

void AsyncEngine::set_stats_listener(std::function<void(const EngineStats&)> listener) {
  std::lock_guard lock(mu_);
  stats_listener_ = std::move(listener);
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

bool AsyncEngine::running() const {
  std::lock_guard lock(mu_);
  return !failed_;
}

bool AsyncEngine::shutting_down() const {
  std::lock_guard lock(mu_);
  return stopping_;
}

void AsyncEngine::publish_stats() {
  EngineStats snapshot = engine_.stats();
  std::function<void(const EngineStats&)> listener;
  {
    std::lock_guard lock(mu_);
    stats_ = snapshot;
    listener = stats_listener_;
  }
  if (listener) listener(snapshot);
}

}  // namespace optimate
