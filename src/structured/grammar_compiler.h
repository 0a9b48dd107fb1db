// Compiles GrammarSpecs into TokenConstraints over one model's vocabulary, with xgrammar (the
// grammar engine vLLM, SGLang and TensorRT-LLM use): a JSON schema, regex, choice list or EBNF
// grammar becomes a pushdown automaton whose per-state token masks are precomputed at compile
// time, so a matcher fills a step's mask in microseconds. Compiled grammars are cached by their
// spec; compile() may run on several threads at once.
//
// A binary built without xgrammar's sources (scripts/setup.sh fetches them) has no grammar
// engine: available() is false and compile() throws kUnsupported saying so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/token_constraint.h"
#include "structured/grammar_spec.h"

namespace optimate::structured {

// The vocabulary as the grammar engine reads it.
struct Vocabulary {
  enum class Encoding { kByteLevel, kByteFallback };  // GPT-2 style "Ġ" bytes, or "▁" + <0xNN>
  Encoding encoding = Encoding::kByteLevel;
  // Every id's spelling (Tokenizer::id_to_token), empty for special tokens: a special token is
  // never text a grammar can match. May be shorter than vocab_size (the model pads its head).
  std::vector<std::string> tokens;
  int64_t vocab_size = 0;            // the logits' width
  std::vector<int32_t> stop_token_ids;  // what ends the output once the grammar may end
};

class GrammarCompiler {
 public:
  explicit GrammarCompiler(const Vocabulary& vocabulary);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  static bool available();
  // Throws Error(kInvalidArgument) naming spec.field for a schema, regex or grammar the engine
  // cannot compile (with its reason), kUnsupported when the binary has no grammar engine.
  std::shared_ptr<const TokenConstraint> compile(const GrammarSpec& spec) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace optimate::structured
