// `optimate perplexity`: perplexity over a text file through the engine, with the KL divergence
// and top-1 agreement against a full-precision run of the same text (bench/perplexity.h). The
// tool a user runs before turning KV quantization on.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "apps/commands.h"
#include "bench/perplexity.h"
#include "config/engine_cli.h"
#include "core/error.h"
#include "core/text_file.h"
#include "engine/tokenizer_codec.h"
#include "model/weights.h"

namespace optimate::apps {
namespace {

struct PerplexityCommand {
  EngineFlags engine;
  std::string file;
  bench::PerplexityOptions options;
  bool json = false;
};

void run_perplexity(PerplexityCommand& o) {
  const EngineConfig evaluated = resolve_engine_config(o.engine);
  if (o.engine.print_config) {
    std::fputs(evaluated.to_toml().c_str(), stdout);
    return;
  }
  // The reference: the same engine with the backend's own KV precision, unquantized weights and
  // no optimizer.
  EngineConfig reference = evaluated;
  reference.kv_cache_dtype = KvCacheDtype::kAuto;
  reference.quantization = WeightQuantization::kNone;
  reference.optimizers.clear();
  // Both engines live at once, and a GPU engine counts memory already taken (here the first
  // engine's) against its own fraction: the reference's fraction is stacked on the first's.
  reference.gpu_memory_utilization = std::min(0.95, 2.0 * evaluated.gpu_memory_utilization);

  const std::string text = read_text_file(o.file, "--file");
  const std::shared_ptr<const Tokenizer> tokenizer =
      evaluated.tokenizer.empty() ? load_model_tokenizer(load_model_header(evaluated.model))
                                  : Tokenizer::load(evaluated.tokenizer);
  const std::vector<int32_t> tokens = tokenizer->encode(text, /*add_special_tokens=*/false);

  const bench::PerplexityResult r = bench::measure_perplexity(evaluated, reference, tokens, o.options);
  std::fputs((o.json ? bench::perplexity_json(r) : bench::perplexity_summary(r)).c_str(), stdout);
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto o = std::make_shared<PerplexityCommand>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "Perplexity over a text file, and the KL divergence from full-precision KV");
  add_engine_flags(*cmd, o->engine);
  cmd->add_option("--file", o->file, "a UTF-8 text file")->required();
  cmd->add_option("--ctx", o->options.ctx, "tokens per window (its second half is scored)")->capture_default_str();
  cmd->add_option("--chunk", o->options.chunk, "prefill chunk: later chunks read the KV of earlier ones as stored")
      ->capture_default_str();
  cmd->add_option("--max-windows", o->options.max_windows, "windows to score at most (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print the figures as JSON");
  cmd->callback([o] { run_perplexity(*o); });
}

}  // namespace optimate::apps
