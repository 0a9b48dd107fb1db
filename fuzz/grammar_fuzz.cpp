// libFuzzer target: the grammar path of structured outputs. The first byte picks what the rest
// is (a JSON schema, a structural tag, a regex, an EBNF grammar, or choices one per line); the
// grammar is checked against the limits, and what passes (up to 2 KiB) is compiled over a
// small byte-level vocabulary and matched for a few tokens. Nothing may crash, whatever the
// grammar; refusals are errors with the field's name.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "structured/grammar_compiler.h"
#include "structured/grammar_limits.h"

namespace {

using optimate::structured::GrammarCompiler;
using optimate::structured::GrammarKind;
using optimate::structured::GrammarSpec;

// Printable ASCII as themselves, space and newline in GPT-2's byte-level spelling, and a last
// id that ends the output.
constexpr int32_t kVocab = 97;

const GrammarCompiler& compiler() {
  static const auto instance = [] {
    optimate::structured::Vocabulary v;
    for (char c = '!'; c <= '~'; ++c) v.tokens.emplace_back(1, c);
    v.tokens.push_back("\xC4\xA0");  // "Ġ": a space
    v.tokens.push_back("\xC4\x8A");  // "Ċ": a newline
    v.tokens.push_back("");          // the end
    v.vocab_size = kVocab;
    v.stop_token_ids = {static_cast<int32_t>(v.tokens.size() - 1)};
    return std::make_unique<GrammarCompiler>(v);
  }();
  return *instance;
}

GrammarSpec spec_of(const uint8_t* data, size_t size) {
  static const GrammarKind kinds[] = {GrammarKind::kJsonSchema, GrammarKind::kStructuralTag, GrammarKind::kRegex,
                                      GrammarKind::kEbnf, GrammarKind::kChoice};
  GrammarSpec spec;
  spec.kind = kinds[data[0] % 5];
  spec.any_whitespace = data[0] & 0x80;
  spec.field = "fuzz";
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (spec.kind == GrammarKind::kChoice) {
    for (size_t start = 0; start <= text.size();) {
      const size_t end = std::min(text.find('\n', start), text.size());
      spec.choices.push_back(text.substr(start, end - start));
      start = end + 1;
    }
  } else {
    spec.text = std::move(text);
  }
  return spec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || !GrammarCompiler::available()) return 0;
  const GrammarSpec spec = spec_of(data, size);
  try {
    optimate::structured::check_grammar_limits(spec);
  } catch (const optimate::Error& e) {
    if (std::string(e.what()).rfind("fuzz: ", 0) != 0) __builtin_trap();  // a refusal names its field
    return 0;
  }
  if (size > 2048) return 0;
  try {
    auto constraint = compiler().compile(spec);
    auto matcher = constraint->new_matcher();
    std::vector<uint32_t> mask(static_cast<size_t>(optimate::token_mask_words(kVocab)));
    for (int step = 0; step < 8 && !matcher->is_terminated(); ++step) {
      matcher->fill_next_token_mask(mask);
      int32_t next = -1;
      for (int32_t id = 0; id < kVocab && next < 0; ++id)
        if (mask[id >> 5] & (1u << (id & 31))) next = id;
      if (next < 0 || !matcher->accept_token(next)) break;
    }
  } catch (const optimate::Error&) {
  }
  return 0;
}
