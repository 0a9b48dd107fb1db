#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/regex_split.h"
#include "tokenizer/utf8.h"

namespace optimate::tokenizer {
namespace {

// Rust's char::is_whitespace: the Unicode White_Space property.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Hugging Face tests single_word boundaries with the regex \w; PCRE2's Unicode \w is the
// same class up to a few combining marks.
bool is_word_char(std::string_view one_char) {
  static const RegexSplitter word(R"(\w)");
  const auto spans = word.split(one_char);
  return spans.size() == 1 && spans[0].matched;
}

std::string_view char_before(std::string_view text, size_t end) {
  size_t begin = end - 1;
  while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
  return text.substr(begin, end - begin);
}

std::string_view char_at(std::string_view text, size_t pos) {
  size_t end = pos;
  next_codepoint(text, end);
  return text.substr(pos, end - pos);
}

char32_t last_codepoint(std::string_view text, size_t end, size_t* begin_out) {
  size_t begin = end - 1;
  while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
  size_t pos = begin;
  const char32_t c = next_codepoint(text, pos);
  if (begin_out) *begin_out = begin;
  return c;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
  trie_.emplace_back();
  std::fill(std::begin(trie_[0].child), std::end(trie_[0].child), -1);
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    int32_t node = 0;
    for (char c : t.content) {
      const auto b = static_cast<uint8_t>(c);
      if (trie_[node].child[b] < 0) {
        trie_[node].child[b] = static_cast<int32_t>(trie_.size());
        trie_.emplace_back();
        std::fill(std::begin(trie_.back().child), std::end(trie_.back().child), -1);
      }
      node = trie_[node].child[b];
    }
    // The first token with a given content wins, as in Hugging Face's map.
    if (trie_[node].token < 0) {
      trie_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(t);
    }
  }
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  if (tokens_.empty()) {
    if (!text.empty()) out.push_back({-1, text});
    return;
  }
  size_t emitted = 0;  // text before this offset has been output
  size_t pos = 0;
  while (pos < text.size()) {
    // Longest token starting at pos.
    int32_t node = 0, best = -1;
    size_t best_end = pos;
    for (size_t i = pos; i < text.size(); ++i) {
      node = trie_[node].child[static_cast<uint8_t>(text[i])];
      if (node < 0) break;
      if (trie_[node].token >= 0) {
        best = trie_[node].token;
        best_end = i + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[best];
    size_t start = pos, stop = best_end;
    if (t.single_word) {
      const bool left_ok = start == 0 || !is_word_char(char_before(text, start));
      const bool right_ok = stop == text.size() || !is_word_char(char_at(text, stop));
      if (!left_ok || !right_ok) {
        ++pos;
        continue;
      }
    }
    if (t.lstrip) {
      while (start > emitted) {
        size_t begin = 0;
        if (!is_white_space(last_codepoint(text, start, &begin))) break;
        start = begin;
      }
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t p = stop;
        if (!is_white_space(next_codepoint(text, p))) break;
        stop = p;
      }
    }
    if (start > emitted) out.push_back({-1, text.substr(emitted, start - emitted)});
    out.push_back({t.id, text.substr(start, stop - start)});
    emitted = pos = stop;
  }
  if (emitted < text.size()) out.push_back({-1, text.substr(emitted)});
}

}  // namespace optimate::tokenizer
