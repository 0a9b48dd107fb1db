// GPT-2's byte-to-unicode alphabet: byte-level BPE vocabularies spell every byte as one
// printable code point (printable Latin-1 bytes stand for themselves, the other 68 bytes map to
// U+0100 and up, so a space is "Ġ" and a newline "Ċ").
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace optimate::tokenizer {

// The vocabulary spelling of raw bytes `bytes` (UTF-8 of the mapped code points).
std::string bytes_to_byte_level(std::string_view bytes);

// The raw bytes a vocabulary string spells; nullopt when some character is outside the
// alphabet (an added token such as "<|im_start|> " with a real space).
std::optional<std::string> byte_level_to_bytes(std::string_view token);

}  // namespace optimate::tokenizer
