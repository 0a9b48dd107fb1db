// A scripted GenerationBackend for HTTP tests: tokens are bytes, and a worker thread plays the
// engine, emitting one letter per choice every tick until max_tokens (or an abort).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "server/api_error.h"
#include "server/generation_backend.h"

namespace optimate::server::testing {

class FakeBackend final : public GenerationBackend {
 public:
  FakeBackend() {
    info_.id = "fake-model";
    info_.max_model_len = 64;
    info_.vocab_size = 256;
    info_.model_path = "/models/fake";
    info_.tokenizer_path = "/models/fake";
    info_.model_type = "llama";
    info_.architectures = {"LlamaForCausalLM"};
    info_.block_size = 16;
    info_.num_kv_blocks = 100;
    info_.max_num_seqs = 8;
    info_.max_num_batched_tokens = 512;
    worker_ = std::thread([this] { run(); });
  }
  ~FakeBackend() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    worker_.join();
  }

  // Held requests wait (count as queued) until released.
  void hold(bool on) { holding_ = on; }

  const ModelInfo& model() const override { return info_; }
  std::vector<int32_t> tokenize(std::string_view text, bool) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  std::string detokenize(std::span<const int32_t> ids) const override {
    return std::string(ids.begin(), ids.end());
  }
  std::string render_chat(std::span<const ChatMessage> messages, bool gen) const override {
    std::string out;
    for (const auto& m : messages) out += m.role + ": " + m.content + "\n";
    if (gen) out += "assistant: ";
    return out;
  }
  void submit(BackendRequest request, OutputSink sink) override {
    std::lock_guard lock(mutex_);
    auto& r = live_[request.request_id];
    r.request = std::move(request);
    r.sink = std::move(sink);
    r.held = holding_.load();
    r.produced.assign(static_cast<size_t>(r.request.params.n), 0);
    last_priority_ = r.request.priority;
    submitted_.push_back(r.request.prompt_token_ids);
  }
  void abort(const std::string& id) override {
    std::lock_guard lock(mutex_);
    aborted_.insert(id);
  }
  bool healthy() const override { return true; }
  // Every live request counts as running; each holds one KV block per 16 prompt tokens.
  LoadReport load() const override {
    std::lock_guard lock(mutex_);
    LoadReport r;
    for (const auto& [id, live] : live_) {
      (live.held ? r.num_waiting : r.num_running) += live.request.params.n;
      if (!live.held) r.kv_used_tokens += 16 * ((static_cast<int64_t>(live.request.prompt_token_ids.size()) + 15) / 16);
    }
    return r;
  }
  void reset_prefix_cache() override { ++num_prefix_cache_resets_; }
  int64_t num_prefix_cache_resets() const { return num_prefix_cache_resets_; }
  int64_t num_waiting() const override {
    std::lock_guard lock(mutex_);
    int64_t n = 0;
    for (const auto& [id, r] : live_) n += r.held;
    return n;
  }
  int64_t num_unfinished() const override {
    std::lock_guard lock(mutex_);
    return static_cast<int64_t>(live_.size());
  }
  Json list_optimizers() const override { return Json::array({{{"name", "priority"}}}); }
  Json update_optimizer(const std::string& name, const Json& body) override {
    if (name != "priority") throw ApiError(404, "no optimizer " + name);
    return {{"name", name}, {"enabled", body.value("enabled", true)}};
  }

  std::set<std::string> aborted_ids() const {
    std::lock_guard lock(mutex_);
    return aborted_;
  }
  int64_t last_priority() const {
    std::lock_guard lock(mutex_);
    return last_priority_;
  }
  // The prompts of the requests submitted so far, in order.
  std::vector<std::vector<int32_t>> submitted_prompts() const {
    std::lock_guard lock(mutex_);
    return submitted_;
  }
  // Waits until no request is live (all finished or aborted).
  bool wait_idle(std::chrono::milliseconds timeout) const {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (num_unfinished() == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

 private:
  struct Live {
    BackendRequest request;
    OutputSink sink;
    bool held = false;
    std::vector<int64_t> produced;
  };

  void run() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard lock(mutex_);
      if (stop_) return;
      for (auto it = live_.begin(); it != live_.end();) {
        auto& r = it->second;
        std::vector<GenerationOutput> outs;
        bool aborted = aborted_.count(it->first) > 0;
        if (r.held && !aborted && !holding_) r.held = false;
        if (r.held && !aborted) {
          ++it;
          continue;
        }
        for (size_t i = 0; i < r.produced.size(); ++i) {
          GenerationOutput o;
          o.index = static_cast<int64_t>(i);
          o.num_prompt_tokens = static_cast<int64_t>(r.request.prompt_token_ids.size());
          if (aborted) {
            o.finished = true;
            o.finish_reason = "abort";
          } else {
            o.text = std::string(1, static_cast<char>('a' + r.produced[i] % 26));
            o.num_new_tokens = 1;
            if (r.request.params.logprobs) o.logprobs.push_back({o.text, -0.5, {{o.text, -0.5}}});
            if (++r.produced[i] == r.request.params.max_tokens) {
              o.finished = true;
              o.finish_reason = "length";
            }
          }
          outs.push_back(std::move(o));
        }
        bool finished = aborted || r.produced[0] == r.request.params.max_tokens;
        r.sink(std::move(outs));
        it = finished ? live_.erase(it) : std::next(it);
      }
    }
  }

  ModelInfo info_;
  mutable std::mutex mutex_;
  bool stop_ = false;
  std::atomic<bool> holding_{false};
  std::map<std::string, Live> live_;
  std::set<std::string> aborted_;
  int64_t last_priority_ = 0;
  std::vector<std::vector<int32_t>> submitted_;
  std::atomic<int64_t> num_prefix_cache_resets_{0};
  std::thread worker_;
};

}  // namespace optimate::server::testing
