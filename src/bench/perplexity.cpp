#include "bench/perplexity.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runner/model_runner.h"
#include "core/error.h"
#include "engine/engine.h"

namespace optimate::bench {
namespace {

// A runner decorator that computes the logits of every token of every slice and keeps them,
// handing the engine only the rows it asked for. Sampling stays on the host so every step
// goes through forward().
class LogitsTap final : public ModelRunner {
 public:
  explicit LogitsTap(std::unique_ptr<ModelRunner> inner) : inner_(std::move(inner)) {}

  const ModelConfig& config() const override { return inner_->config(); }
  const KvCacheShape& kv_shape() const override { return inner_->kv_shape(); }
  StepCapacity capacity() const override { return inner_->capacity(); }
  int64_t weight_bytes() const override { return inner_->weight_bytes(); }
  void requantize(std::span<const RequantizeOp> ops) override { inner_->requantize(ops); }

  void forward(const ForwardBatch& batch, std::vector<float>& logits) override {
    ForwardBatch all = batch;
    for (SeqSlice& s : all.seqs) s.all_logits = true;
    inner_->forward(all, rows_);
    const size_t vocab = static_cast<size_t>(config().vocab_size);
    captured_.insert(captured_.end(), rows_.begin(), rows_.end());
    logits.clear();
    size_t row = 0;
    for (const SeqSlice& s : batch.seqs) {
      row += s.token_ids.size();
      if (s.want_logits) logits.insert(logits.end(), rows_.begin() + (row - 1) * vocab, rows_.begin() + row * vocab);
    }
  }

  // The rows of every token computed since the last call, in order.
  std::vector<float> take() { return std::exchange(captured_, {}); }

 private:
  std::unique_ptr<ModelRunner> inner_;
  std::vector<float> rows_;
  std::vector<float> captured_;
};

struct Evaluator {
  LogitsTap* tap = nullptr;
  std::unique_ptr<Engine> engine;
};

Evaluator make_evaluator(EngineConfig config, const PerplexityOptions& o) {
  config.max_num_batched_tokens = o.chunk;
  config.max_num_seqs = 1;
  if (config.max_model_len == 0 || config.max_model_len < o.ctx + 1) config.max_model_len = o.ctx + 1;
  EngineParts parts = create_engine_parts(config);
  auto tap = std::make_unique<LogitsTap>(std::move(parts.runner));
  Evaluator e;
  e.tap = tap.get();
  parts.runner = std::move(tap);
  e.engine = std::make_unique<Engine>(std::move(config), std::move(parts));
  return e;
}

// Logits of every position of one window ([ctx, vocab]).
std::vector<float> run_window(Evaluator& e, std::span<const int32_t> window, int64_t index) {
  SamplingParams p;
  p.max_tokens = 1;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  e.tap->take();
  e.engine->add_request(fmt::format("window-{}", index), std::vector<int32_t>(window.begin(), window.end()), p);
  while (e.engine->has_unfinished()) e.engine->step();
  return e.tap->take();
}

// log-softmax of one row, in double.
void log_softmax(std::span<const float> row, std::vector<double>& out) {
  const double m = *std::max_element(row.begin(), row.end());
  double sum = 0.0;
  for (float x : row) sum += std::exp(static_cast<double>(x) - m);
  const double lse = m + std::log(sum);
  out.resize(row.size());
  for (size_t i = 0; i < row.size(); ++i) out[i] = static_cast<double>(row[i]) - lse;
}

}  // namespace

PerplexityResult measure_perplexity(const EngineConfig& evaluated, const EngineConfig& reference,
                                    const std::vector<int32_t>& tokens, const PerplexityOptions& o) {
  if (o.ctx < 4 || o.chunk < 1)
    fail(ErrorCode::kInvalidArgument, "perplexity needs --ctx >= 4 and --chunk >= 1 (got {} and {})", o.ctx, o.chunk);
  int64_t windows = static_cast<int64_t>(tokens.size()) / o.ctx;
  if (o.max_windows > 0) windows = std::min(windows, o.max_windows);
  if (windows < 1)
    fail(ErrorCode::kInvalidArgument, "the text has {} tokens, fewer than one window of {} (--ctx)",
         tokens.size(), o.ctx);
  Evaluator test = make_evaluator(evaluated, o);
  Evaluator ref = make_evaluator(reference, o);
  const size_t vocab = static_cast<size_t>(test.engine->runner().config().vocab_size);

  PerplexityResult r;
  r.num_windows = windows;
  double nll = 0.0, ref_nll = 0.0, kl = 0.0;
  int64_t agree = 0;
  std::vector<double> lp, lq;
  for (int64_t w = 0; w < windows; ++w) {
    const std::span<const int32_t> window(tokens.data() + w * o.ctx, static_cast<size_t>(o.ctx));
    const std::vector<float> q = run_window(test, window, w);
    const std::vector<float> p = run_window(ref, window, w);
    OPTIMATE_CHECK(q.size() == vocab * o.ctx && p.size() == vocab * o.ctx,
                   "window {}: {} and {} logits for {} positions", w, q.size(), p.size(), o.ctx);
    // Position i predicts token i + 1; the second half of the window is scored.
    for (int64_t i = o.ctx / 2; i < o.ctx - 1; ++i) {
      log_softmax(std::span(p).subspan(i * vocab, vocab), lp);
      log_softmax(std::span(q).subspan(i * vocab, vocab), lq);
      const int32_t next = window[i + 1];
      nll -= lq[next];
      ref_nll -= lp[next];
      double d = 0.0;
      for (size_t v = 0; v < vocab; ++v) d += std::exp(lp[v]) * (lp[v] - lq[v]);
      kl += d;
      r.max_kl = std::max(r.max_kl, d);
      const auto argmax = [](const std::vector<double>& x) { return std::max_element(x.begin(), x.end()) - x.begin(); };
      agree += argmax(lp) == argmax(lq) ? 1 : 0;
      ++r.num_scored;
    }
  }
  const double n = static_cast<double>(r.num_scored);
  r.perplexity = std::exp(nll / n);
  r.reference_perplexity = std::exp(ref_nll / n);
  r.mean_kl = kl / n;
  r.top1_agreement = static_cast<double>(agree) / n;
  const EngineConfig& c = evaluated;
  r.configuration = fmt::format("kv-cache-dtype {}{}{}", choice_name(c.kv_cache_dtype),
                                c.quantization == WeightQuantization::kNone
                                    ? ""
                                    : ", quantization " + std::string(choice_name(c.quantization)),
                                c.optimizers.empty() ? "" : ", optimizers:");
  for (const auto& spec : c.optimizers) r.configuration += " " + spec.name;
  return r;
}

std::string perplexity_summary(const PerplexityResult& r) {
  return fmt::format(
      "{}: perplexity {:.4f} against {:.4f} at full precision ({:+.2f}%), over {} positions in {} windows\n"
      "KL divergence from full precision: mean {:.6f}, max {:.4f} nats; top-1 agreement {:.2f}%\n",
      r.configuration, r.perplexity, r.reference_perplexity,
      100.0 * (r.perplexity / r.reference_perplexity - 1.0), r.num_scored, r.num_windows, r.mean_kl, r.max_kl,
      100.0 * r.top1_agreement);
}

std::string perplexity_json(const PerplexityResult& r) {
  nlohmann::json j = {{"configuration", r.configuration},     {"windows", r.num_windows},
                      {"positions", r.num_scored},            {"perplexity", r.perplexity},
                      {"reference_perplexity", r.reference_perplexity},
                      {"perplexity_change", r.perplexity / r.reference_perplexity - 1.0},
                      {"mean_kl", r.mean_kl},                 {"max_kl", r.max_kl},
                      {"top1_agreement", r.top1_agreement}};
  return j.dump(2) + "\n";
}

}  // namespace optimate::bench
