#include "engine/async_engine.h"

#include <chrono>

#include "core/logging.h"

namespace optimate {

std::optional<RequestOutput> RequestStream::next() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || num_unfinished_ == 0 || error_; });
  if (!queue_.empty()) {
    RequestOutput out = std::move(queue_.front());
    queue_.pop_front();
    return out;
  }
  if (error_) throw *error_;
  return std::nullopt;
}

bool RequestStream::finished() const {
  std::lock_guard lock(mu_);
  return num_unfinished_ == 0 && queue_.empty();
}

void RequestStream::push(RequestOutput out) {
  if (listener_.on_output) {
    {
      std::lock_guard lock(mu_);
      if (out.finished) --num_unfinished_;
    }
    listener_.on_output(std::move(out));
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (out.finished) --num_unfinished_;
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
}

void RequestStream::set_error(const std::string& message, ErrorCode code) {
  {
    std::lock_guard lock(mu_);
    error_.emplace(code, message);
    num_unfinished_ = 0;
  }
  cv_.notify_all();
  if (listener_.on_error) listener_.on_error(*error_);
}

AsyncEngine::AsyncEngine(Engine engine) : engine_(std::move(engine)) {
  thread_ = std::thread([this] { run(); });
}

AsyncEngine::~AsyncEngine() { shutdown(ShutdownMode::kAbort); }

std::shared_ptr<RequestStream> AsyncEngine::submit(
    const std::string& request_id, std::variant<std::string, std::vector<int32_t>> prompt,
    const SamplingParams& params, const RequestMetadata& metadata) {
  return submit(request_id, std::move(prompt), params, metadata, RequestListener{});
}

std::shared_ptr<RequestStream> AsyncEngine::submit(
    const std::string& request_id, std::variant<std::string, std::vector<int32_t>> prompt,
    const SamplingParams& params, const RequestMetadata& metadata, RequestListener listener) {
  params.validate();
  if (request_id.empty()) fail(ErrorCode::kInvalidArgument, "request id must not be empty");
  auto stream = std::make_shared<RequestStream>(params.n, std::move(listener));
  {
    std::lock_guard lock(mu_);
    if (stopping_) fail(ErrorCode::kResourceExhausted, "the engine is shutting down");
    if (!streams_.emplace(request_id, stream).second)
      fail(ErrorCode::kInvalidArgument, "request id '{}' is already in use", request_id);
    commands_.push_back(Submit{request_id, std::move(prompt), params, metadata});
  }
  cv_.notify_all();
  return stream;
}

void AsyncEngine::abort(const std::string& request_id) {
  {
    std::lock_guard lock(mu_);
    commands_.push_back(request_id);
  }
  cv_.notify_all();
}

void AsyncEngine::shutdown(ShutdownMode mode) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) mode_ = mode;
    else if (mode == ShutdownMode::kAbort) mode_ = mode;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void AsyncEngine::apply(std::deque<Command>& commands) {
  for (auto& command : commands) {
    if (auto* s = std::get_if<Submit>(&command)) {
      try {
        if (auto* text = std::get_if<std::string>(&s->prompt))
          engine_.add_request(s->id, *text, s->params, s->metadata);
        else
          engine_.add_request(s->id, std::get<std::vector<int32_t>>(s->prompt), s->params, s->metadata);
      } catch (const Error& e) {
        std::shared_ptr<RequestStream> stream;
        {
          std::lock_guard lock(mu_);
          auto it = streams_.find(s->id);
          if (it != streams_.end()) { stream = it->second; streams_.erase(it); }
        }
        if (stream) stream->set_error(e.what(), e.code());
      }
    } else if (auto* task = std::get_if<Task>(&command)) {
      run_task(*task);
    } else {
      engine_.abort(std::get<std::string>(command));
    }
  }
  commands.clear();
}

void AsyncEngine::run() {
  std::deque<Command> commands;
  while (true) {
    bool abort_all = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !commands_.empty() || stopping_ || engine_.has_unfinished(); });
      commands.swap(commands_);
      abort_all = stopping_ && mode_ == ShutdownMode::kAbort;
    }
    apply(commands);
    if (abort_all) {
      std::vector<std::string> ids;
      {
        std::lock_guard lock(mu_);
        for (const auto& [id, stream] : streams_) ids.push_back(id);
      }
      for (const auto& id : ids) engine_.abort(id);
    }
    std::vector<RequestOutput> outs;
    try {
      if (engine_.has_unfinished()) outs = engine_.step();
    } catch (const Error& e) {
      spdlog::error("engine step failed: {}", e.what());
      decltype(streams_) failed;
      // Commands posted since the swap are dropped: a task's promise then breaks, and its caller
      // hears the engine stopped instead of waiting for a thread that is gone.
      decltype(commands_) dropped;
      {
        std::lock_guard lock(mu_);
        failed.swap(streams_);
        dropped.swap(commands_);
        stopping_ = true;
        failed_ = true;
        exited_ = true;
      }
      // Listeners run user code that may call back into this engine: never under mu_.
      for (auto& [id, stream] : failed) stream->set_error(e.what(), e.code());
      return;
    }
    // Stats first: a client that reads /metrics once its last output arrives sees this step.
    publish_stats();
    for (auto& out : outs) {
      std::shared_ptr<RequestStream> stream;
      {
        std::lock_guard lock(mu_);
        auto it = streams_.find(out.request_id);
        if (it == streams_.end()) continue;
        stream = it->second;
      }
      const std::string id = out.request_id;
      stream->push(std::move(out));
      bool done = false;
      {
        std::lock_guard stream_lock(stream->mu_);
        done = stream->num_unfinished_ == 0;
      }
      if (done) {
        std::lock_guard lock(mu_);
        streams_.erase(id);
      }
    }
    std::unique_lock lock(mu_);
    if (stopping_ && commands_.empty() && !engine_.has_unfinished()) {
      exited_ = true;  // under the lock run_on_engine takes: no task is queued behind this
      return;
    }
    // The batch policy held every waiting request back and nothing runs: sleep until its
    // retry time, a new command or shutdown instead of stepping in a busy loop.
    if (const std::optional<int64_t> until = engine_.idle_until_ns(); until && outs.empty())
      engine_.clock().wait_until(cv_, lock, *until, [&] { return !commands_.empty() || stopping_; });
  }
}

}  // namespace optimate
