// A compiled PCRE2 pattern (UTF + UCP, JIT when available) that splits text into the spans it
// matches and the gaps between them, as Hugging Face's Split pre-tokenizer does.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace optimate::tokenizer {

struct Span {
  size_t begin;
  size_t end;
  bool matched;  // a match of the pattern, or the text between two matches
};

class RegexSplitter {
 public:
  // `pattern` uses the syntax of tokenizer.json (Oniguruma); \s and \S are rewritten to the
  // Unicode White_Space set Oniguruma uses, which differs from PCRE2's \s at U+180E.
  explicit RegexSplitter(std::string_view pattern);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  const std::string& pattern() const { return pattern_; }

  // Matches and gaps covering `text` (valid UTF-8) in order; empty gaps are left out.
  std::vector<Span> split(std::string_view text) const;

 private:
  std::string pattern_;
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// Rewrites \s and \S (inside and outside character classes) as explicit White_Space classes.
std::string rewrite_whitespace_classes(std::string_view pattern);

}  // namespace optimate::tokenizer
