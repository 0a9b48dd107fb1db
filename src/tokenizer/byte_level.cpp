#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace optimate::tokenizer {
namespace {

struct Alphabet {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<int16_t, 324> cp_to_byte{};  // every mapped code point is below U+0144

  Alphabet() {
    cp_to_byte.fill(-1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_to_cp[b] = printable ? static_cast<char32_t>(b) : next_extra++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

std::string bytes_to_byte_level(std::string_view bytes) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(a.byte_to_cp[static_cast<uint8_t>(c)], out);
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const char32_t cp = next_codepoint(token, pos);
    if (cp >= a.cp_to_byte.size() || a.cp_to_byte[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(a.cp_to_byte[cp]));
  }
  return out;
}

}  // namespace optimate::tokenizer
