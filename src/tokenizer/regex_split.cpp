#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex_split.h"

#include <pcre2.h>

#include "core/error.h"

namespace optimate::tokenizer {
namespace {

// Unicode White_Space, the set Oniguruma's \s matches in Unicode mode.
constexpr std::string_view kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

}  // namespace

std::string rewrite_whitespace_classes(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (n == 'S') {
        if (in_class)
          fail(ErrorCode::kUnsupported, "pre-tokenizer regex {:?}: \\S inside a class", p);
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(std::string_view pattern)
    : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  const std::string rewritten = rewrite_whitespace_classes(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    fail(ErrorCode::kInvalidFile, "pre-tokenizer regex {:?}: {} at offset {}", pattern,
         reinterpret_cast<const char*>(message), error_offset);
  }
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

namespace {

// Per-thread match state: the JIT stack grows past PCRE2's 32 KiB default because patterns
// such as \s+(?!\S) backtrack over long whitespace runs.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(4, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  ThreadMatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

}  // namespace

std::vector<Span> RegexSplitter::split(std::string_view text) const {
  thread_local ThreadMatchState state;
  std::vector<Span> spans;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0, gap_begin = 0;
  while (offset <= text.size()) {
    const int rc =
        compiled_->jit
            ? pcre2_jit_match(compiled_->code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                              state.data, state.context)
            : pcre2_match(compiled_->code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                          state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      fail(ErrorCode::kResourceExhausted, "pre-tokenizer regex {:?} failed on a {}-byte text: {}",
           pattern_, text.size(), reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {  // an empty match splits nothing; step over one character
      if (begin >= text.size()) break;
      offset = begin + 1;
      while (offset < text.size() && (static_cast<uint8_t>(text[offset]) & 0xC0) == 0x80) ++offset;
      continue;
    }
    if (begin > gap_begin) spans.push_back({gap_begin, begin, false});
    spans.push_back({begin, end, true});
    gap_begin = offset = end;
  }
  if (gap_begin < text.size()) spans.push_back({gap_begin, text.size(), false});
  return spans;
}

}  // namespace optimate::tokenizer
