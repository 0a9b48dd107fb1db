// `optimate tokenize`: the token ids of a text (or of a one-message chat prompt) as JSON,
// for checking a model's tokenizer against other tools.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "core/error.h"
#include "core/text_file.h"
#include "tokenizer/tokenizer.h"

namespace optimate::apps {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string file;
  bool chat = false;
  bool no_special = false;
};

std::string read_all(std::istream& in) {
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void run_tokenize(const TokenizeOptions& o, bool have_text, bool have_file) {
  const auto tokenizer = Tokenizer::load(o.model);
  std::string text;
  if (have_text) {
    text = o.text;
  } else if (have_file) {
    text = read_text_file(o.file, "--file");
  } else {
    text = read_all(std::cin);
  }
  std::vector<int32_t> ids;
  if (o.chat) {
    // The template writes BOS itself, so nothing more is added.
    const ChatMessage message{"user", text};
    ids = tokenizer->encode(tokenizer->chat_template().render({&message, 1}, true), false);
  } else {
    ids = tokenizer->encode(text, !o.no_special);
  }
  const nlohmann::ordered_json out = {{"tokens", ids}, {"count", ids.size()}};
  std::printf("%s\n", out.dump().c_str());
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Print the token ids of a text as JSON: {\"tokens\": [...], \"count\": N}");
  cmd->add_option("--model", opts->model, "GGUF file, or a directory with tokenizer.json")->required();
  CLI::Option* text = cmd->add_option("--text", opts->text, "text to tokenize");
  CLI::Option* file = cmd->add_option("--file", opts->file, "read the text from this file (default: stdin)");
  text->excludes(file);
  cmd->add_flag("--chat", opts->chat,
                "wrap the text as one user message in the model's chat template, with the "
                "assistant generation prompt");
  cmd->add_flag("--no-special", opts->no_special,
                "do not add the BOS/EOS tokens the tokenizer adds by default");
  cmd->callback([opts, text, file] { run_tokenize(*opts, text->count() > 0, file->count() > 0); });
}

}  // namespace optimate::apps
