#include "bench/calibration_grid.h"

#include <fmt/format.h>

#include <algorithm>

#include "bench/stats.h"
#include "core/error.h"

namespace optimate::bench {
namespace {

// Short contexts leave a decode to the weights; at the longest, KV reads show.
constexpr int64_t kDecodeContexts[] = {64, 512, 2048};
constexpr int64_t kShortestPrefill = 16;
constexpr int64_t kPromptTokens = 64;    // prompts of a many-sequence prefill step
constexpr int64_t kChunkContext = 1024;  // cached context of a chunked-prefill step

int64_t longest_seq(const GridShape& s) {
  int64_t n = 0;
  for (const SeqWork& w : s.seqs) n = std::max(n, w.context_len + w.num_new_tokens);
  return n;
}

int64_t blocks_needed(const GridShape& s, int64_t block_size) {
  int64_t n = 0;
  for (const SeqWork& w : s.seqs) n += (w.context_len + w.num_new_tokens + block_size - 1) / block_size;
  return n;
}

GridShape decode(int64_t batch, int64_t context) {
  return {fmt::format("decode {} seqs @{}", batch, context), std::vector<SeqWork>(batch, SeqWork{1, context})};
}

GridShape mixed(int64_t prefill, int64_t decodes, int64_t context) {
  GridShape s{fmt::format("prefill {} + decode {} @{}", prefill, decodes, context), {{prefill, 0}}};
  s.seqs.insert(s.seqs.end(), decodes, SeqWork{1, context});
  return s;
}

std::vector<GridShape> candidate_shapes(const GridLimits& l) {
  std::vector<GridShape> out;
  for (int64_t context : kDecodeContexts) {
    for (int64_t b = 1; b < l.max_num_seqs; b *= 2) out.push_back(decode(b, context));
    out.push_back(decode(l.max_num_seqs, context));
  }
  for (int64_t n = kShortestPrefill; n < l.max_num_batched_tokens; n *= 2)
    out.push_back({fmt::format("prefill {}", n), {{n, 0}}});
  out.push_back({fmt::format("prefill {}", l.max_num_batched_tokens), {{l.max_num_batched_tokens, 0}}});
  const int64_t chunk = std::min<int64_t>(256, l.max_num_batched_tokens);
  out.push_back({fmt::format("prefill {} @{}", chunk, kChunkContext), {{chunk, kChunkContext}}});
  const int64_t prompts = std::min(l.max_num_seqs, l.max_num_batched_tokens / kPromptTokens);
  if (prompts >= 2)
    out.push_back({fmt::format("prefill {} x {}", prompts, kPromptTokens),
                   std::vector<SeqWork>(prompts, SeqWork{kPromptTokens, 0})});
  out.push_back(mixed(128, 8, 512));
  out.push_back(mixed(256, 32, 128));
  return out;
}

}  // namespace

int64_t num_new_tokens(const std::vector<SeqWork>& seqs) {
  int64_t n = 0;
  for (const SeqWork& w : seqs) n += w.num_new_tokens;
  return n;
}

CalibrationGrid make_calibration_grid(const GridLimits& l) {
  for (auto [v, what] : {std::pair{l.max_num_seqs, "max_num_seqs"},
                         {l.max_num_batched_tokens, "max_num_batched_tokens"},
                         {l.max_model_len, "max_model_len"},
                         {l.num_kv_blocks, "num_kv_blocks"},
                         {l.block_size, "block_size"}})
    if (v < 1) fail(ErrorCode::kInvalidArgument, "calibration grid: {} must be >= 1, got {}", what, v);
  CalibrationGrid grid;
  for (GridShape& s : candidate_shapes(l)) {
    std::string why;
    if (static_cast<int64_t>(s.seqs.size()) > l.max_num_seqs)
      why = fmt::format("{} seqs > max_num_seqs {}", s.seqs.size(), l.max_num_seqs);
    else if (num_new_tokens(s.seqs) > l.max_num_batched_tokens)
      why = fmt::format("{} tokens > max_num_batched_tokens {}", num_new_tokens(s.seqs), l.max_num_batched_tokens);
    else if (longest_seq(s) > l.max_model_len)
      why = fmt::format("{} positions > max_model_len {}", longest_seq(s), l.max_model_len);
    else if (blocks_needed(s, l.block_size) > l.num_kv_blocks)
      why = fmt::format("{} KV blocks > the cache's {}", blocks_needed(s, l.block_size), l.num_kv_blocks);
    if (why.empty())
      grid.shapes.push_back(std::move(s));
    else
      grid.skipped.push_back(s.name + ": " + why);
  }
  return grid;
}

namespace {

// A shape's forward batch and the token ids and block tables it points into.
struct PreparedShape {
  std::vector<std::vector<int32_t>> tokens, tables;
  ForwardBatch batch;
};

PreparedShape prepare(const GridShape& shape, const ModelRunner& runner) {
  const KvCacheShape& kv = runner.kv_shape();
  const ModelConfig& model = runner.config();
  if (blocks_needed(shape, kv.block_size) > kv.num_blocks || longest_seq(shape) > model.max_position_embeddings)
    fail(ErrorCode::kInvalidArgument,
         "calibration shape '{}' needs {} KV blocks and {} positions; the runner has {} and {}", shape.name,
         blocks_needed(shape, kv.block_size), longest_seq(shape), kv.num_blocks, model.max_position_embeddings);
  PreparedShape p;
  int32_t next_block = 0;
  for (const SeqWork& w : shape.seqs) {
    // Token ids are arbitrary valid ids: the cost of a step does not depend on them.
    std::vector<int32_t>& t = p.tokens.emplace_back(w.num_new_tokens);
    for (int64_t i = 0; i < w.num_new_tokens; ++i)
      t[i] = static_cast<int32_t>(1 + (w.context_len + i) * 31 % (model.vocab_size - 1));
    std::vector<int32_t>& table =
        p.tables.emplace_back((w.context_len + w.num_new_tokens + kv.block_size - 1) / kv.block_size);
    for (int32_t& b : table) b = next_block++;
  }
  // The inner vectors' buffers stay where they are when `p` moves, so the spans stay valid.
  for (size_t s = 0; s < shape.seqs.size(); ++s)
    p.batch.seqs.push_back({p.tokens[s], shape.seqs[s].context_len, p.tables[s], true});
  return p;
}

}  // namespace

std::vector<MeasuredShape> measure_grid(ModelRunner& runner, const Clock& clock, const std::vector<GridShape>& shapes,
                                        int warmup, int repeats, const GridProgressFn& progress) {
  if (repeats < 1 || warmup < 0)
    fail(ErrorCode::kInvalidArgument, "calibration needs repeats >= 1 and warmup >= 0, got {} and {}", repeats, warmup);
  std::vector<PreparedShape> prepared;
  for (const GridShape& shape : shapes) prepared.push_back(prepare(shape, runner));
  std::vector<MeasuredShape> out;
  for (const GridShape& shape : shapes) out.push_back({shape, {}, 0.0});
  // Whole passes over the grid rather than one shape's repeats in a row: a burst of other work
  // on the machine then hits one run of a shape, which the median drops, not all of them.
  std::vector<float> logits;
  // As the engine steps: greedy rows sampled on the device when the runner can.
  std::vector<int32_t> token_ids;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const int passes = warmup + repeats;
  for (int pass = 0; pass < passes; ++pass) {
    const int64_t pass_start = clock.now_ns();
    for (size_t i = 0; i < prepared.size(); ++i) {
      const int64_t t0 = clock.now_ns();
      const std::vector<SampleSpec> specs(prepared[i].batch.seqs.size(), SampleSpec{&greedy, 0, 0});
      if (!runner.forward_sample(prepared[i].batch, specs, token_ids)) runner.forward(prepared[i].batch, logits);
      if (pass >= warmup) out[i].runs_s.push_back(static_cast<double>(clock.now_ns() - t0) * 1e-9);
    }
    if (progress) progress(pass + 1, passes, static_cast<double>(clock.now_ns() - pass_start) * 1e-9);
  }
  for (MeasuredShape& m : out) m.median_s = percentile(m.runs_s, 50.0);
  return out;
}

}  // namespace optimate::bench
