#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"

namespace optimate::tokenizer {

DecoderSpec DecoderSpec::from_json(const nlohmann::json& v) {
  DecoderSpec spec;
  const std::string type = v.is_object() ? v.value("type", "") : "";
  auto unsupported = [&] {
    fail(ErrorCode::kUnsupported, "decoder {} is not supported", v.dump());
  };
  if (type == "ByteLevel") return spec;
  spec.kind = Kind::kSentencePiece;
  if (type == "Metaspace") {
    if (v.value("replacement", std::string(kMetaspace)) != kMetaspace) unsupported();
    const std::string scheme = v.value("prepend_scheme", v.value("add_prefix_space", true) ? "always" : "never");
    spec.strip_leading_spaces = scheme == "never" ? 0 : 1;
    return spec;
  }
  if (type != "Sequence") unsupported();
  bool replaced = false;
  for (const auto& step : v.at("decoders")) {
    const std::string t = step.value("type", "");
    if (t == "Replace" && step.at("pattern").value("String", "") == kMetaspace &&
        step.value("content", "") == " ") {
      replaced = true;
    } else if (t == "ByteFallback") {
      spec.byte_fallback = true;
    } else if (t == "Fuse") {
    } else if (t == "Strip" && step.value("content", "") == " " && step.value("stop", 0) == 0) {
      spec.strip_leading_spaces = step.value("start", 0);
    } else {
      unsupported();
    }
  }
  if (!replaced) unsupported();
  return spec;
}

int byte_token_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int value = 0;
  for (char c : t.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') value |= c - '0';
    else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
    else return -1;
  }
  return value;
}

void DecodeStream::emit(std::string_view text, std::string& out) {
  while (chars_seen_ < spec_.strip_leading_spaces && !text.empty()) {
    ++chars_seen_;
    if (text[0] != ' ') {
      chars_seen_ = spec_.strip_leading_spaces;
      break;
    }
    text.remove_prefix(1);
  }
  out.append(text);
}

void DecodeStream::flush_byte_run(std::string& out) {
  if (byte_run_.empty()) return;
  if (is_valid_utf8(byte_run_)) {
    emit(byte_run_, out);
  } else {
    std::string replaced;
    for (size_t i = 0; i < byte_run_.size(); ++i) replaced.append(kReplacementChar);
    emit(replaced, out);
  }
  byte_run_.clear();
}

void DecodeStream::push(std::string_view token, std::string& out) {
  if (spec_.kind == DecoderSpec::Kind::kByteLevel) {
    std::string text;
    const auto bytes = byte_level_to_bytes(token);
    utf8_.push(bytes ? std::string_view(*bytes) : token, text);
    emit(text, out);
    return;
  }
  if (spec_.byte_fallback) {
    if (const int b = byte_token_value(token); b >= 0) {
      byte_run_.push_back(static_cast<char>(b));
      return;
    }
  }
  flush_byte_run(out);
  std::string text;
  size_t pos = 0;
  for (size_t hit; (hit = token.find(kMetaspace, pos)) != std::string_view::npos;
       pos = hit + kMetaspace.size()) {
    text.append(token.substr(pos, hit - pos));
    text.push_back(' ');
  }
  text.append(token.substr(pos));
  emit(text, out);
}

void DecodeStream::finish(std::string& out) {
  std::string text;
  utf8_.finish(text);
  emit(text, out);
  flush_byte_run(out);
}

}  // namespace optimate::tokenizer
