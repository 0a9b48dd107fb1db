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

#include "core/error.h"
#include "server/api_error.h"
#include "server/generation_backend.h"

namespace optimate::server::testing {

class FakeBackend final : public GenerationBackend {
 public:
  FakeBackend() {
    info_.id = "fake-model";
    info_.max_model_len = 64;
    info_.vocab_size = 256;
    info_.eos_token_ids = {0};
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

  // Before any request: a longer context (scripts longer than the default's 64 tokens).
  void set_max_model_len(int64_t n) { info_.max_model_len = n; }
  // Before any request: which way the clients' priorities point (--priority-order).
  void set_priority_order(PriorityOrder order) { info_.priority_order = order; }
  // Held requests wait (count as queued) until released.
  void hold(bool on) { holding_ = on; }

  const ModelInfo& model() const override { return info_; }
  std::vector<int32_t> tokenize(std::string_view text, bool) const override {
    wait_while(tokenizer_held_);
    return std::vector<int32_t>(text.begin(), text.end());
  }
  std::string detokenize(std::span<const int32_t> ids) const override {
    return std::string(ids.begin(), ids.end());
  }
  std::string token_string(int32_t id) const override { return "<" + std::to_string(id) + ">"; }
  std::string render_chat(std::span<const ChatMessage> messages, bool gen,
                          const ChatRenderOptions& options) const override {
    std::string out;
    if (options.tools) out += "tools: " + std::to_string(options.tools->size()) + "\n";
    for (const auto& m : messages) out += m.role + ": " + m.content + "\n";
    if (gen) out += "assistant: ";
    return out;
  }
  // Records the spec; the constraint allows everything (the fake draws no tokens).
  std::shared_ptr<const TokenConstraint> compile_grammar(const structured::GrammarSpec& spec) override {
    struct AllowAll final : TokenConstraint, TokenMatcher {
      std::unique_ptr<TokenMatcher> new_matcher() const override { return std::make_unique<AllowAll>(); }
      std::string describe() const override { return "any"; }
      void fill_next_token_mask(std::span<uint32_t> mask) override { std::fill(mask.begin(), mask.end(), ~0u); }
      bool accept_token(int32_t) override { return true; }
      bool is_terminated() const override { return false; }
    };
    {
      std::unique_lock gate(gate_mutex_);
      ++num_compiling_;
      gate_open_.wait(gate, [this] { return !compiles_held_; });
      --num_compiling_;
      ++num_compiles_;
    }
    if (spec.kind == structured::GrammarKind::kRegex && spec.text == "(")
      throw Error(ErrorCode::kInvalidArgument, spec.field + ": the regex cannot be compiled: unbalanced parenthesis");
    std::lock_guard lock(mutex_);
    grammars_.push_back(spec);
    return std::make_shared<AllowAll>();
  }
  // While held, compiles wait inside compile_grammar (a grammar that is slow to compile).
  void hold_compiles(bool on) {
    {
      std::lock_guard gate(gate_mutex_);
      compiles_held_ = on;
    }
    gate_open_.notify_all();
  }
  int64_t num_compiles() const {  // finished
    std::lock_guard gate(gate_mutex_);
    return num_compiles_;
  }
  int64_t num_compiling() const {  // inside compile_grammar now
    std::lock_guard gate(gate_mutex_);
    return num_compiling_;
  }
  std::vector<structured::GrammarSpec> grammars() const {
    std::lock_guard lock(mutex_);
    return grammars_;
  }
  // Choices write `text` one byte per tick instead of letters (then stop).
  void script(std::string text) {
    std::lock_guard lock(mutex_);
    script_ = std::move(text);
  }
  std::vector<BackendRequest> submitted_requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  // Every request's whole answer (one token "a" per choice, finished) is given to its sink
  // inside submit, before submit returns: an engine that refuses or finishes a request at once.
  void finish_in_submit(bool on) { finish_in_submit_ = on; }

  void submit(BackendRequest request, OutputSink sink) override {
    if (finish_in_submit_) {
      std::vector<GenerationOutput> outputs;
      for (int64_t i = 0; i < request.params.n; ++i) {
        GenerationOutput o;
        o.index = i;
        o.text = "a";
        o.token_ids = {'a'};
        o.num_new_tokens = 1;
        o.finished = true;
        o.finish_reason = "length";
        o.num_prompt_tokens = static_cast<int64_t>(request.prompt_token_ids.size());
        outputs.push_back(std::move(o));
      }
      sink(std::move(outputs));
      return;
    }
    std::lock_guard lock(mutex_);
    auto& r = live_[request.request_id];
    r.request = std::move(request);
    r.sink = std::move(sink);
    r.held = holding_.load();
    r.produced.assign(static_cast<size_t>(r.request.params.n), 0);
    last_priority_ = r.request.metadata.priority.value;
    submitted_.push_back(r.request.prompt_token_ids);
    requests_.push_back(r.request);
  }
  void abort(const std::string& id) override {
    std::lock_guard lock(mutex_);
    aborted_.insert(id);
  }
  bool healthy() const override { return true; }
  // A held request waits with its prompt; a running one holds one KV block per 16 prompt tokens.
  LoadReport load() const override {
    std::lock_guard lock(mutex_);
    LoadReport r;
    for (const auto& [id, live] : live_) {
      const int64_t n = live.request.params.n;
      const int64_t prompt = static_cast<int64_t>(live.request.prompt_token_ids.size());
      (live.held ? r.num_waiting : r.num_running) += n;
      if (live.held) r.waiting_tokens += n * prompt;
      else r.kv_used_tokens += n * 16 * ((prompt + 15) / 16);
    }
    return r;
  }
  void reset_prefix_cache() override {
    wait_for_engine();
    ++num_prefix_cache_resets_;
  }
  // While held, what waits for the engine (the prefix-cache flush, listing optimizers) waits
  // inside the backend: an engine in a long step.
  void hold_engine(bool on) { set_gate(engine_held_, on); }
  // While held, tokenizing waits: a prompt of megabytes.
  void hold_tokenizer(bool on) { set_gate(tokenizer_held_, on); }
  int64_t num_held_at_gates() const {  // threads held by hold_engine or hold_tokenizer
    std::lock_guard gate(gate_mutex_);
    return num_held_at_gates_;
  }
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
  Json list_optimizers() const override {
    wait_for_engine();
    return Json::array({{{"name", "priority"}}});
  }
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
            const int64_t k = r.produced[i];
            o.text = script_.empty() ? std::string(1, static_cast<char>('a' + k % 26)) : script_.substr(k, 1);
            o.num_new_tokens = 1;
            if (k == 0) o.queue_s = 0.0;  // scheduled at once (a held request only once released)
            const int32_t id = static_cast<uint8_t>(o.text[0]);
            o.token_ids = {id};
            // Choice i's tokens are a little less likely than choice i - 1's (best_of ranks them).
            const double lp = -0.5 - 0.1 * static_cast<double>(i);
            if (r.request.params.logprobs) o.logprobs.push_back({{id, o.text, lp, 1}, {{id, o.text, lp, 1}}, true});
            if (k == 0 && r.request.params.prompt_logprobs) {
              const auto& prompt = r.request.prompt_token_ids;
              for (size_t t = 0; t < prompt.size(); ++t)
                o.prompt_logprobs.push_back({{prompt[t], std::string(1, static_cast<char>(prompt[t])), -1.0, 2}, {}, t > 0});
            }
            const bool script_done = !script_.empty() && k + 1 == static_cast<int64_t>(script_.size());
            if (++r.produced[i] == r.request.params.max_tokens || script_done) {
              r.produced[i] = r.request.params.max_tokens;
              o.finished = true;
              o.finish_reason = script_done ? "stop" : "length";
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
  std::vector<structured::GrammarSpec> grammars_;
  mutable std::mutex gate_mutex_;
  mutable std::condition_variable gate_open_;
  bool compiles_held_ = false;
  std::atomic<bool> finish_in_submit_{false};
  bool engine_held_ = false;
  bool tokenizer_held_ = false;
  mutable int64_t num_held_at_gates_ = 0;
  void set_gate(bool& held, bool on) {
    {
      std::lock_guard gate(gate_mutex_);
      held = on;
    }
    gate_open_.notify_all();
  }
  void wait_while(const bool& held) const {
    std::unique_lock gate(gate_mutex_);
    ++num_held_at_gates_;
    gate_open_.wait(gate, [&held] { return !held; });
    --num_held_at_gates_;
  }
  void wait_for_engine() const { wait_while(engine_held_); }
  int64_t num_compiles_ = 0;
  int64_t num_compiling_ = 0;
  std::vector<BackendRequest> requests_;
  std::string script_;
  std::thread worker_;
};

}  // namespace optimate::server::testing
