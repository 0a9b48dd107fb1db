// Loading a Hugging Face tokenizer.json (+ tokenizer_config.json / chat_template.jinja).
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text_file.h"
#include "tokenizer/tokenizer.h"

namespace optimate {

using namespace tokenizer;
using nlohmann::json;

namespace {

json read_json(const std::string& path) {
  const std::string text = read_regular_file(path, path, kMaxTextFileBytes);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorCode::kInvalidFile, "{}: not valid JSON: {}", path, e.what());
  }
}

// tokenizer_config.json spells a token as a string or as {"content": ...}.
std::string token_content(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return {};
}

void read_post_processor(const json& v, const std::string& path, TokenizerParts& parts) {
  if (v.is_null()) return;
  const std::string type = v.value("type", "");
  if (type == "Sequence") {
    for (const json& p : v.at("processors")) read_post_processor(p, path, parts);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets.
  } else if (type == "TemplateProcessing") {
    const json& specials = v.at("special_tokens");
    bool after_sequence = false;
    for (const json& item : v.at("single")) {
      if (item.contains("Sequence")) {
        after_sequence = true;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      if (!specials.contains(name))
        fail(ErrorCode::kInvalidFile, "{}: post_processor uses {:?} without defining it", path, name);
      for (const json& id : specials.at(name).at("ids"))
        (after_sequence ? parts.suffix_ids : parts.prefix_ids).push_back(id.get<int32_t>());
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    parts.prefix_ids.push_back(v.at("cls").at(1).get<int32_t>());
    parts.suffix_ids.push_back(v.at("sep").at(1).get<int32_t>());
  } else {
    fail(ErrorCode::kUnsupported, "{}: post_processor type {:?} is not supported", path, type);
  }
}

void read_model(const json& m, const std::string& path, TokenizerParts& parts) {
  if (m.value("type", "BPE") != "BPE")
    fail(ErrorCode::kUnsupported, "{}: model type {:?} is not supported (only BPE)", path,
         m.value("type", ""));
  auto nonempty = [&](const char* key) {
    return m.contains(key) && !m.at(key).is_null() && !m.at(key).get<std::string>().empty();
  };
  if (nonempty("continuing_subword_prefix") || nonempty("end_of_word_suffix"))
    fail(ErrorCode::kUnsupported, "{}: BPE subword prefixes/suffixes are not supported", path);
  if (m.contains("dropout") && !m.at("dropout").is_null() && m.at("dropout").get<double>() > 0)
    fail(ErrorCode::kUnsupported, "{}: BPE dropout is not supported", path);

  for (const auto& [token, id] : m.at("vocab").items()) {
    const auto i = id.get<int32_t>();
    if (i < 0 || i > (1 << 24)) fail(ErrorCode::kInvalidFile, "{}: token {:?} has id {}", path, token, i);
    if (static_cast<size_t>(i) >= parts.id_to_token.size()) parts.id_to_token.resize(i + 1);
    parts.id_to_token[i] = token;
    parts.vocab.try_emplace(token, i);
  }
  for (const json& merge : m.value("merges", json::array())) {
    std::string left, right;
    if (merge.is_array()) {
      left = merge.at(0).get<std::string>();
      right = merge.at(1).get<std::string>();
    } else {
      const std::string s = merge.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) fail(ErrorCode::kInvalidFile, "{}: merge {:?} has no space", path, s);
      left = s.substr(0, space);
      right = s.substr(space + 1);
    }
    const auto l = parts.vocab.find(left), r = parts.vocab.find(right);
    if (l == parts.vocab.end() || r == parts.vocab.end())
      fail(ErrorCode::kInvalidFile, "{}: merge {:?} {:?} uses a token not in the vocabulary", path, left, right);
    parts.merges.emplace_back(l->second, r->second);
  }
  parts.bpe.byte_fallback = m.value("byte_fallback", false);
  parts.bpe.fuse_unk = m.value("fuse_unk", false);
  parts.bpe.ignore_merges = m.value("ignore_merges", false);
  if (m.contains("unk_token") && m.at("unk_token").is_string()) {
    const std::string unk = m.at("unk_token").get<std::string>();
    const auto it = parts.vocab.find(unk);
    if (it == parts.vocab.end()) fail(ErrorCode::kInvalidFile, "{}: unk_token {:?} is not in the vocabulary", path, unk);
    parts.bpe.unk_id = it->second;
  }
}

}  // namespace

std::shared_ptr<const Tokenizer> Tokenizer::from_tokenizer_json(const std::string& path,
                                                                const std::string& config_path) {
  const json j = read_json(path);
  TokenizerParts parts;
  parts.name = path;
  try {
    read_model(j.at("model"), path, parts);
    for (const json& a : j.value("added_tokens", json::array())) {
      AddedToken t;
      t.id = a.at("id").get<int32_t>();
      t.content = a.at("content").get<std::string>();
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.single_word = a.value("single_word", false);
      t.normalized = a.value("normalized", !t.special);
      if (t.id < 0 || t.id > (1 << 24)) fail(ErrorCode::kInvalidFile, "{}: added token id {}", path, t.id);
      if (static_cast<size_t>(t.id) >= parts.id_to_token.size()) parts.id_to_token.resize(t.id + 1);
      parts.id_to_token[t.id] = t.content;
      parts.added_tokens.push_back(std::move(t));
    }
    parts.normalizer = Normalizer::from_json(j.value("normalizer", json()));
    parts.pre_tokenizer = PreTokenizer::from_json(j.value("pre_tokenizer", json()));
    parts.decoder = DecoderSpec::from_json(j.value("decoder", json()));
    read_post_processor(j.value("post_processor", json()), path, parts);
  } catch (const json::exception& e) {
    fail(ErrorCode::kInvalidFile, "{}: {}", path, e.what());
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with(path)) throw;
    fail(e.code(), "{}: {}", path, e.what());
  }
  parts.kind = parts.pre_tokenizer.byte_level() ? "byte-level BPE" : "SentencePiece BPE";

  auto id_of = [&](const std::string& content) -> int32_t {
    for (const AddedToken& t : parts.added_tokens)
      if (t.content == content) return t.id;
    const auto it = parts.vocab.find(content);
    return it == parts.vocab.end() ? -1 : it->second;
  };
  if (!config_path.empty()) {
    const json c = read_json(config_path);
    if (c.contains("bos_token")) parts.bos_id = id_of(token_content(c.at("bos_token")));
    if (c.contains("eos_token")) parts.eos_id = id_of(token_content(c.at("eos_token")));
    if (c.contains("chat_template")) {
      const json& t = c.at("chat_template");
      if (t.is_string()) {
        parts.chat_template = t.get<std::string>();
      } else if (t.is_array()) {  // named templates: the "default" one serves chat
        for (const json& named : t)
          if (named.value("name", "") == "default") parts.chat_template = named.value("template", "");
      }
    }
  }
  const auto jinja = std::filesystem::path(path).parent_path() / "chat_template.jinja";
  if (parts.chat_template.empty() && std::filesystem::exists(jinja)) {
    parts.chat_template = read_regular_file(jinja.string(), jinja.string(), kMaxTextFileBytes);
  }
  if (parts.bos_id < 0 && parts.prefix_ids.size() == 1) parts.bos_id = parts.prefix_ids[0];
  return std::make_shared<const Tokenizer>(std::move(parts));
}

}  // namespace optimate
