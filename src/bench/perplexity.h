// The quality gate for KV quantization (and any change to how the engine computes): perplexity
// over a text, measured through the engine so that later tokens attend to KV stored the way
// the configuration stores it (chunked prefill writes each chunk's KV before the next chunk
// reads it), and against a full-precision run of the same text, the mean KL divergence
// KL(P_reference || P) and the top-1 agreement per scored position.
//
// The text is cut into windows of `ctx` tokens; each window is one request computed in
// prefill chunks of `chunk` tokens; the positions in the window's second half are scored (the
// first half is context), as llama.cpp's perplexity tool does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/engine_config.h"

namespace optimate::bench {

struct PerplexityOptions {
  int64_t ctx = 512;         // tokens per window
  int64_t chunk = 128;       // prefill chunk (the step's token budget)
  int64_t max_windows = 0;   // 0: every whole window of the text
};

struct PerplexityResult {
  std::string configuration;  // the evaluated engine, for the report
  int64_t num_windows = 0;
  int64_t num_scored = 0;     // positions scored (next-token predictions)
  double perplexity = 0.0;
  double reference_perplexity = 0.0;
  double mean_kl = 0.0;       // nats, KL(reference || evaluated), averaged over positions
  double max_kl = 0.0;
  double top1_agreement = 0.0;  // share of positions whose argmax equals the reference's
};

// Runs `evaluated` and `reference` (typically the same model with full-precision KV and no
// optimizer) over `tokens`. Error(kInvalidArgument) when the text is shorter than one window.
PerplexityResult measure_perplexity(const EngineConfig& evaluated, const EngineConfig& reference,
                                    const std::vector<int32_t>& tokens, const PerplexityOptions& options);

std::string perplexity_summary(const PerplexityResult& r);
std::string perplexity_json(const PerplexityResult& r);

}  // namespace optimate::bench
