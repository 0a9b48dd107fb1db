// UTF-8 helpers shared by the tokenizer: validation with the replacement rule that Python's
// bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy both follow
// (each maximal ill-formed subpart becomes one U+FFFD), and a streaming form of it that holds
// back an incomplete trailing character.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace optimate::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Appends the UTF-8 encoding of `codepoint` (must be a Unicode scalar value).
void append_utf8(char32_t codepoint, std::string& out);

// Decodes the character starting at `pos` of valid UTF-8 `text`; advances `pos`.
char32_t next_codepoint(std::string_view text, size_t& pos);

bool is_valid_utf8(std::string_view bytes);

// `bytes` with every maximal ill-formed subpart replaced by U+FFFD.
std::string sanitize_utf8(std::string_view bytes);

// Python's str.isspace(), which jinja's `trim` filter (str.strip) uses.
bool is_python_space(char32_t codepoint);

// Lossy UTF-8 decoding fed a few bytes at a time: push() appends to `out` every character that
// is complete (and U+FFFD for every ill-formed subpart already known to be ill-formed); the
// bytes of a character that may still be completed wait for the next push() or finish().
class Utf8Stream {
 public:
  void push(std::string_view bytes, std::string& out);
  // Flushes a held incomplete character as one U+FFFD.
  void finish(std::string& out);
  bool has_pending() const { return !pending_.empty(); }

 private:
  std::string pending_;
};

}  // namespace optimate::tokenizer
