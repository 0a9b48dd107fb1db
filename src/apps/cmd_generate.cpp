// `optimate generate`: one prompt through the CPU backend, the text streamed to stdout as it is
// generated and a speed summary on stderr. The single sequence owns the whole KV cache, so its
// block table is simply blocks 0..n-1; serving goes through the engine and kv/ instead.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "backend/cpu/cpu_model_runner.h"
#include "backend/cpu/sampler.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/sampling_params.h"
#include "model/weights.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace optimate::apps {
namespace {

constexpr int64_t kBlockSize = 16;
constexpr int64_t kPrefillChunk = 512;  // bounds the activation buffers of a long prompt

struct GenerateOptions {
  std::string model;
  std::string tokenizer;  // default: the model's own (GGUF metadata or the HF directory)
  std::string prompt;
  bool chat = false;
  std::optional<std::string> system;
  SamplingParams sampling;
  std::optional<uint64_t> seed;
  int threads = 0;
};

std::vector<int32_t> encode_prompt(const GenerateOptions& o, const Tokenizer& tokenizer) {
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
  o.sampling.seed = o.seed;
  o.sampling.validate();
  const LoadedModel model = load_model(o.model);
  std::shared_ptr<const Tokenizer> tokenizer;
  if (!o.tokenizer.empty()) tokenizer = Tokenizer::load(o.tokenizer);
  else if (model.gguf) tokenizer = Tokenizer::from_gguf(*model.gguf);
  else tokenizer = Tokenizer::load(model.hf_dir);

  const std::vector<int32_t> prompt = encode_prompt(o, *tokenizer);
  if (prompt.empty()) fail(ErrorCode::kInvalidArgument, "the prompt encodes to no tokens");
  const int64_t num_prompt = static_cast<int64_t>(prompt.size());
  const int64_t max_len = model.config.max_position_embeddings;
  if (num_prompt + o.sampling.max_tokens > max_len)
    fail(ErrorCode::kInvalidArgument,
         "This model's maximum context length is {} tokens. However, you requested {} tokens "
         "({} in the prompt, {} for the completion).",
         max_len, num_prompt + o.sampling.max_tokens, num_prompt, o.sampling.max_tokens);

  const int64_t num_blocks = (num_prompt + o.sampling.max_tokens + kBlockSize - 1) / kBlockSize;
  cpu::CpuModelRunner runner(model.config, model.weights,
                             {.num_kv_blocks = num_blocks, .block_size = kBlockSize, .num_threads = o.threads});
  std::vector<int32_t> block_table(num_blocks);
  std::iota(block_table.begin(), block_table.end(), 0);

  std::vector<int32_t> stop_ids = tokenizer->stop_ids();
  for (int64_t id : model.config.eos_token_ids) stop_ids.push_back(static_cast<int32_t>(id));

  cpu::Sampler sampler(model.config.vocab_size);
  IncrementalDetokenizer detokenizer(tokenizer, o.sampling.skip_special_tokens);
  std::vector<int32_t> output;
  output.reserve(o.sampling.max_tokens);
  std::vector<float> logits;
  const uint64_t seed = o.sampling.seed ? *o.sampling.seed : cpu::draw_request_seed();
  const SteadyClock clock;

  ForwardBatch batch;  // reused: no allocation per token
  SeqSlice& slice = batch.seqs.emplace_back();
  slice.block_table = block_table;
  const double t0 = clock.now_s();
  for (int64_t start = 0; start < num_prompt; start += kPrefillChunk) {
    const int64_t n = std::min(kPrefillChunk, num_prompt - start);
    slice.token_ids = std::span(prompt).subspan(start, n);
    slice.start_pos = start;
    slice.want_logits = start + n == num_prompt;
    runner.forward(batch, logits);
  }
  const double t_prefill = clock.now_s();

  cpu::SampleInput sample_in;
  sample_in.params = &o.sampling;
  sample_in.seed = seed;
  sample_in.prompt_ids = prompt;
  int64_t decode_steps = 0;
  while (true) {
    sample_in.logits = logits;
    sample_in.output_index = static_cast<int64_t>(output.size());
    sample_in.output_ids = output;
    const cpu::SampleOutput next = sampler.sample(sample_in);
    output.push_back(next.token_id);
    if (!o.sampling.ignore_eos && std::find(stop_ids.begin(), stop_ids.end(), next.token_id) != stop_ids.end())
      break;
    write_text(detokenizer.push(next.token_id));
    if (static_cast<int64_t>(output.size()) >= o.sampling.max_tokens) break;
    slice.token_ids = std::span(output).last(1);
    slice.start_pos = num_prompt + static_cast<int64_t>(output.size()) - 1;
    runner.forward(batch, logits);
    ++decode_steps;
  }
  write_text(detokenizer.finish());
  const double t_end = clock.now_s();
  if (isatty(fileno(stdout))) write_text("\n");

  const double prefill_s = t_prefill - t0;
  const double decode_s = t_end - t_prefill;
  std::fprintf(stderr, "prompt: %lld tokens, %.1f tok/s; generation: %zu tokens, %.1f tok/s\n",
               static_cast<long long>(num_prompt), prefill_s > 0 ? num_prompt / prefill_s : 0.0, output.size(),
               decode_s > 0 ? static_cast<double>(std::max<int64_t>(decode_steps, 1)) / decode_s : 0.0);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto opts = std::make_shared<GenerateOptions>();
  opts->sampling.max_tokens = 256;
  CLI::App* cmd = app.add_subcommand("generate", "Generate a completion for one prompt on the CPU, streaming to stdout");
  cmd->add_option("--model", opts->model, "GGUF file or Hugging Face model directory")->required();
  cmd->add_option("--tokenizer", opts->tokenizer, "tokenizer (GGUF, tokenizer.json or directory); default: the model's");
  cmd->add_option("--prompt", opts->prompt, "the prompt text")->required();
  cmd->add_flag("--chat", opts->chat, "wrap the prompt as a user message in the model's chat template");
  cmd->add_option("--system", opts->system, "system message (with --chat)");
  cmd->add_option("--max-tokens", opts->sampling.max_tokens, "most tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", opts->sampling.temperature, "0 = greedy")->capture_default_str();
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
  cmd->add_option("--threads", opts->threads, "CPU threads, 0 = all cores")->capture_default_str();
  cmd->callback([opts] { run_generate(*opts); });
}

}  // namespace optimate::apps
