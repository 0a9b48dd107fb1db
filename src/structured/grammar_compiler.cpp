#include "structured/grammar_compiler.h"

#include <algorithm>
#include <exception>
#include <string_view>
#include <thread>
#include <vector>

#include "core/error.h"
#include "structured/grammar_limits.h"

#if OPTIMATE_HAVE_XGRAMMAR
#include <xgrammar/xgrammar.h>
#endif

namespace optimate::structured {

#if OPTIMATE_HAVE_XGRAMMAR
namespace {

// The longest reason from the grammar engine a client gets back.
constexpr size_t kMaxReasonBytes = 500;

// xgrammar's message without its "[HH:MM:SS] /source/file.cc:123: " prefix (a source path
// of this machine), and cut: its messages may quote the whole grammar.
std::string engine_reason(std::string_view what) {
  if (what.starts_with("[")) {
    const size_t source = what.find("] ");
    const size_t colon = source == std::string_view::npos ? source : what.find(": ", source);
    if (colon != std::string_view::npos) what.remove_prefix(colon + 2);
  }
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.remove_suffix(1);
  if (what.size() <= kMaxReasonBytes) return std::string(what);
  size_t cut = kMaxReasonBytes;
  while (cut > 0 && (static_cast<unsigned char>(what[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8
  return std::string(what.substr(0, cut)) + "...";
}

class XgrammarMatcher final : public TokenMatcher {
 public:
  XgrammarMatcher(const xgrammar::CompiledGrammar& grammar, int64_t vocab_size)
      : matcher_(grammar), vocab_size_(vocab_size) {}

  void fill_next_token_mask(std::span<uint32_t> mask) override {
    OPTIMATE_CHECK(static_cast<int64_t>(mask.size()) == token_mask_words(vocab_size_),
                   "token mask of {} words for a vocabulary of {}", mask.size(), vocab_size_);
    if (matcher_.IsTerminated()) {  // only an ending token may follow
      std::fill(mask.begin(), mask.end(), 0u);
      for (int id : matcher_.GetStopTokenIds()) mask[id >> 5] |= 1u << (id & 31);
      return;
    }
    int64_t shape[1] = {static_cast<int64_t>(mask.size())};
    DLTensor t{};
    t.data = mask.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    matcher_.FillNextTokenBitmask(&t, 0);
  }
  bool accept_token(int32_t token_id) override { return matcher_.AcceptToken(token_id); }
  bool is_terminated() const override { return matcher_.IsTerminated(); }

 private:
  xgrammar::GrammarMatcher matcher_;
  int64_t vocab_size_;
};

class XgrammarConstraint final : public TokenConstraint {
 public:
  XgrammarConstraint(xgrammar::CompiledGrammar grammar, int64_t vocab_size, GrammarKind kind)
      : grammar_(std::move(grammar)), vocab_size_(vocab_size), kind_(kind) {}
  std::unique_ptr<TokenMatcher> new_matcher() const override {
    return std::make_unique<XgrammarMatcher>(grammar_, vocab_size_);
  }
  std::string describe() const override { return grammar_kind_name(kind_); }
  size_t memory_bytes() const override { return grammar_.MemorySizeBytes(); }

 private:
  xgrammar::CompiledGrammar grammar_;
  int64_t vocab_size_;
  GrammarKind kind_;
};

// True when a fresh matcher allows no token, not even one that ends the output: the grammar
// matches no text this vocabulary can spell (an empty enum's schema, a regex that can never
// match). Sampling under an empty mask would draw a token outside the grammar.
bool accepts_nothing(const xgrammar::CompiledGrammar& grammar, int64_t vocab_size) {
  XgrammarMatcher matcher(grammar, vocab_size);
  std::vector<uint32_t> mask(static_cast<size_t>(token_mask_words(vocab_size)));
  matcher.fill_next_token_mask(mask);
  return std::all_of(mask.begin(), mask.end(), [](uint32_t word) { return word == 0; });
}

// An EBNF string literal holding `text` exactly.
std::string ebnf_literal(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

}  // namespace

struct GrammarCompiler::Impl {
  int64_t vocab_size;
  xgrammar::GrammarCompiler compiler;

  // The server caches compiled grammars itself (server/grammar_pool.h), by request.
  Impl(const xgrammar::TokenizerInfo& info, int64_t vocab, int threads)
      : vocab_size(vocab), compiler(info, threads, /*cache_enabled=*/false) {}

  // compile() checked: the limits first, the engine's errors as Error naming the field, and a
  // grammar that matches nothing refused.
  xgrammar::CompiledGrammar checked_compile(const GrammarSpec& spec) {
    if (spec.kind == GrammarKind::kChoice && spec.choices.empty())
      fail(ErrorCode::kInvalidArgument, "{}: the list of choices is empty", spec.field);
    check_grammar_limits(spec);
    try {
      xgrammar::CompiledGrammar grammar = compile(spec);
      if (accepts_nothing(grammar, vocab_size))
        fail(ErrorCode::kInvalidArgument, "{}: the {} matches no text the model can write", spec.field,
             grammar_kind_name(spec.kind));
      return grammar;
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail(ErrorCode::kInvalidArgument, "{}: the {} cannot be compiled: {}", spec.field, grammar_kind_name(spec.kind),
           engine_reason(e.what()));
    }
  }

  xgrammar::CompiledGrammar compile(const GrammarSpec& spec) {
    const std::optional<int> max_ws = spec.any_whitespace ? std::optional<int>(kMaxJsonWhitespace) : std::nullopt;
    switch (spec.kind) {
      case GrammarKind::kJsonSchema:
        return compiler.CompileJSONSchema(spec.text, spec.any_whitespace, std::nullopt, std::nullopt,
                                          /*strict_mode=*/true, max_ws);
      case GrammarKind::kJsonObject:
        return compiler.CompileJSONSchema(R"({"type": "object"})", spec.any_whitespace, std::nullopt,
                                          std::nullopt, true, max_ws);
      case GrammarKind::kRegex: return compiler.CompileRegex(spec.text);
      case GrammarKind::kChoice: {
        std::string ebnf = "root ::= ";
        for (size_t i = 0; i < spec.choices.size(); ++i) ebnf += (i ? " | " : "") + ebnf_literal(spec.choices[i]);
        return compiler.CompileGrammar(ebnf, "root");
      }
      case GrammarKind::kEbnf: return compiler.CompileGrammar(spec.text, "root");
      case GrammarKind::kLark: return compiler.CompileLark(spec.text);
      case GrammarKind::kStructuralTag: return compiler.CompileStructuralTag(spec.text);
    }
    fail(ErrorCode::kInternal, "unknown grammar kind");
  }
};

GrammarCompiler::GrammarCompiler(const Vocabulary& v) {
  if (v.vocab_size < static_cast<int64_t>(v.tokens.size()))
    fail(ErrorCode::kInvalidArgument, "grammar vocabulary: {} tokens for a vocab_size of {}", v.tokens.size(),
         v.vocab_size);
  const auto type = v.encoding == Vocabulary::Encoding::kByteLevel ? xgrammar::VocabType::BYTE_LEVEL
                                                                   : xgrammar::VocabType::BYTE_FALLBACK;
  std::vector<int32_t> stops = v.stop_token_ids;
  xgrammar::TokenizerInfo info(v.tokens, type, static_cast<int>(v.vocab_size), stops,
                               v.encoding == Vocabulary::Encoding::kByteFallback);
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  impl_ = std::make_unique<Impl>(info, v.vocab_size, threads);
}

GrammarCompiler::~GrammarCompiler() = default;

bool GrammarCompiler::available() { return true; }

std::shared_ptr<const TokenConstraint> GrammarCompiler::compile(const GrammarSpec& spec) const {
  return std::make_shared<XgrammarConstraint>(impl_->checked_compile(spec), impl_->vocab_size, spec.kind);
}

#else  // built without xgrammar's sources

struct GrammarCompiler::Impl {};

GrammarCompiler::GrammarCompiler(const Vocabulary&) {}
GrammarCompiler::~GrammarCompiler() = default;
bool GrammarCompiler::available() { return false; }

std::shared_ptr<const TokenConstraint> GrammarCompiler::compile(const GrammarSpec& spec) const {
  fail(ErrorCode::kUnsupported,
       "{}: structured outputs need the grammar engine, which this binary was built without "
       "(scripts/setup.sh fetches xgrammar's sources; configure again to build it in)",
       spec.field);
}

#endif

}  // namespace optimate::structured
