// `optimate generate`: one prompt through the engine (any backend, --config and --optimizer as
// for `serve`), the text streamed to stdout as it is generated and a speed summary on stderr.
// It is a small client of the engine: it stops, detokenizes and samples as the server does.
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "config/engine_cli.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/sampling_params.h"
#include "engine/engine.h"
#include "engine/tokenizer_codec.h"

namespace optimate::apps {
namespace {

struct GenerateOptions {
  EngineFlags engine;
  std::string prompt;
  bool chat = false;
  std::optional<std::string> system;
  SamplingParams sampling;
  std::optional<std::string> seed;  // parsed strictly: CLI11 wraps -1 and saturates 2^64 into an unsigned
};

std::vector<int32_t> encode_prompt(const GenerateOptions& o, const Engine& engine) {
  const auto* codec = dynamic_cast<const TokenizerCodec*>(engine.codec().get());
  if (!codec) fail(ErrorCode::kInvalidArgument, "model '{}' has no tokenizer (--tokenizer)", engine.config().model);
  const Tokenizer& tokenizer = *codec->tokenizer();
  if (!o.chat) {
    if (o.system) fail(ErrorCode::kInvalidArgument, "--system needs --chat");
    return tokenizer.encode(o.prompt, /*add_special_tokens=*/true);
  }
  std::vector<ChatMessage> messages;
  if (o.system) messages.push_back({"system", *o.system});
  messages.push_back({"user", o.prompt});
  // The template writes BOS itself, so nothing more is added.
  return tokenizer.encode(tokenizer.chat_template().render(messages, /*add_generation_prompt=*/true), false);
}

void write_text(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

void run_generate(GenerateOptions& o) {
  const EngineConfig config = resolve_engine_config(o.engine);
  if (o.engine.print_config) {
    std::fputs(config.to_toml().c_str(), stdout);
    return;
  }
  if (o.seed) {
    uint64_t seed = 0;
    const char* end = o.seed->data() + o.seed->size();
    const auto [ptr, ec] = std::from_chars(o.seed->data(), end, seed);
    if (o.seed->empty() || ec != std::errc() || ptr != end)
      fail(ErrorCode::kInvalidArgument, "--seed must be an integer in [0, 2^64), got {}", *o.seed);
    o.sampling.seed = seed;
  }
  o.sampling.validate();
  Engine engine = create_optimized_engine(config);

  const std::vector<int32_t> prompt = encode_prompt(o, engine);
  if (prompt.empty()) fail(ErrorCode::kInvalidArgument, "the prompt encodes to no tokens");
  const int64_t num_prompt = static_cast<int64_t>(prompt.size());
  const int64_t max_len = engine.limits().max_model_len;
  if (num_prompt + o.sampling.max_tokens > max_len)
    fail(ErrorCode::kInvalidArgument,
         "This model's maximum context length is {} tokens. However, you requested {} tokens "
         "({} in the prompt, {} for the completion).",
         max_len, num_prompt + o.sampling.max_tokens, num_prompt, o.sampling.max_tokens);

  const SteadyClock clock;
  const double t0 = clock.now_s();
  engine.add_request("generate", prompt, o.sampling);
  std::optional<double> t_first;
  int64_t num_output = 0;
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      if (!out.new_token_ids.empty() && !t_first) t_first = clock.now_s();
      num_output = out.usage.completion_tokens;
      write_text(out.text);
    }
  }
  const double t_end = clock.now_s();
  if (isatty(fileno(stdout))) write_text("\n");

  // The first step computes the prompt and draws the first token; later ones decode.
  const double prefill_s = t_first.value_or(t_end) - t0;
  const double decode_s = t_end - t_first.value_or(t_end);
  std::fprintf(stderr, "prompt: %lld tokens, %.1f tok/s; generation: %lld tokens, %.1f tok/s\n",
               static_cast<long long>(num_prompt), prefill_s > 0 ? num_prompt / prefill_s : 0.0,
               static_cast<long long>(num_output),
               decode_s > 0 ? static_cast<double>(std::max<int64_t>(num_output - 1, 1)) / decode_s : 0.0);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto opts = std::make_shared<GenerateOptions>();
  opts->sampling.max_tokens = 256;
  // Greedy by default: on held-out questions (python/benchmarks/answer_quality.py) the embedded
  // model answers 80% right greedily, as with llama.cpp's sampling defaults (80-82%), but 52-54%
  // at temperature 1, the API's default; greedy is also the same answer every time.
  opts->sampling.temperature = 0.0f;
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate a completion for one prompt through the engine, streaming to stdout");
  // --seed is the request's sampling seed here (as a client's "seed" field), not the engine's.
  add_engine_flags(*cmd, opts->engine, {"seed"});
  cmd->add_option("--prompt", opts->prompt, "the prompt text")->required();
  cmd->add_flag("--chat", opts->chat, "wrap the prompt as a user message in the model's chat template");
  cmd->add_option("--system", opts->system, "system message (with --chat)");
  cmd->add_option("--max-tokens", opts->sampling.max_tokens, "most tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", opts->sampling.temperature, "0 = greedy (the default here; the server's "
                  "requests sample at 1 unless they say otherwise, as the OpenAI API defines)")->capture_default_str();
  cmd->add_option("--top-p", opts->sampling.top_p, "nucleus sampling mass, 1 = off")->capture_default_str();
  cmd->add_option("--top-k", opts->sampling.top_k, "keep the k most likely tokens, -1 = off")->capture_default_str();
  cmd->add_option("--min-p", opts->sampling.min_p, "drop tokens below min_p x the best probability, 0 = off")
      ->capture_default_str();
  cmd->add_option("--repetition-penalty", opts->sampling.repetition_penalty, "1 = off (Hugging Face rule)")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", opts->sampling.presence_penalty, "OpenAI rule, 0 = off")->capture_default_str();
  cmd->add_option("--frequency-penalty", opts->sampling.frequency_penalty, "OpenAI rule, 0 = off")
      ->capture_default_str();
  cmd->add_option("--seed", opts->seed, "fixed seed for reproducible sampling (default: random)");
  cmd->add_flag("--ignore-eos", opts->sampling.ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->callback([opts] { run_generate(*opts); });
}

}  // namespace optimate::apps
