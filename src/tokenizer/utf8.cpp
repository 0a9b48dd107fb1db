#include "tokenizer/utf8.h"

namespace optimate::tokenizer {
namespace {

// Length of the longest prefix of `bytes` (starting at a lead byte) that is a valid start of a
// UTF-8 sequence, and the full length that lead byte announces. `complete` is true when the
// prefix is a whole character. Follows Unicode's table 3-7 of well-formed byte sequences.
struct SequenceCheck {
  size_t valid_prefix;  // 0 when the lead byte itself is ill-formed
  size_t needed;
};

SequenceCheck check_sequence(std::string_view bytes) {
  const auto b0 = static_cast<uint8_t>(bytes[0]);
  if (b0 < 0x80) return {1, 1};
  size_t needed = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    needed = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    needed = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    needed = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return {0, 1};
  }
  size_t i = 1;
  for (; i < needed && i < bytes.size(); ++i) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    const uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
  }
  return {i, needed};
}

// Appends the decodable part of `bytes` to `out`; returns how many trailing bytes form a
// character that is valid so far but incomplete (they are not consumed).
size_t decode_lossy(std::string_view bytes, std::string& out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const SequenceCheck c = check_sequence(bytes.substr(pos));
    if (c.valid_prefix == c.needed) {
      out.append(bytes.substr(pos, c.needed));
      pos += c.needed;
    } else if (c.valid_prefix == 0) {
      out.append(kReplacementChar);
      pos += 1;
    } else if (pos + c.valid_prefix == bytes.size()) {
      return bytes.size() - pos;  // may still be completed by later bytes
    } else {
      out.append(kReplacementChar);
      pos += c.valid_prefix;
    }
  }
  return 0;
}

}  // namespace

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t next_codepoint(std::string_view text, size_t& pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  size_t len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  if (pos + len > text.size()) len = text.size() - pos;
  char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3F);
  pos += len;
  return cp;
}

bool is_valid_utf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const SequenceCheck c = check_sequence(bytes.substr(pos));
    if (c.valid_prefix != c.needed) return false;
    pos += c.needed;
  }
  return true;
}

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const size_t incomplete = decode_lossy(bytes, out);
  if (incomplete > 0) out.append(kReplacementChar);
  return out;
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

void Utf8Stream::push(std::string_view bytes, std::string& out) {
  pending_.append(bytes);
  const size_t incomplete = decode_lossy(pending_, out);
  pending_.erase(0, pending_.size() - incomplete);
}

void Utf8Stream::finish(std::string& out) {
  if (!pending_.empty()) out.append(kReplacementChar);
  pending_.clear();
}

}  // namespace optimate::tokenizer
