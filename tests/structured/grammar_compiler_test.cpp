// The grammar engine over SmolLM2's real vocabulary: a "model" of random logits decodes under
// each grammar's mask, and every output must parse and match what was asked (checked with
// nlohmann's parser and std::regex, independent of the engine). Bad grammars are refused with
// an error naming the request field.
#include <random>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "sampling/sampler.h"
#include "structured/grammar_compiler.h"
#include "tokenizer/tokenizer.h"

namespace optimate::structured {
namespace {

const std::string kModel = std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

class GrammarDecoding : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!GrammarCompiler::available()) return;
    tokenizer_ = Tokenizer::load(kModel);
    Vocabulary v;
    v.vocab_size = tokenizer_->vocab_size();
    for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id)
      v.tokens.push_back(tokenizer_->is_special(id) ? std::string() : tokenizer_->id_to_token(id));
    v.stop_token_ids = tokenizer_->stop_ids();
    compiler_ = new GrammarCompiler(v);
  }
  static void TearDownTestSuite() {
    delete compiler_;
    compiler_ = nullptr;
    tokenizer_.reset();
  }
  void SetUp() override {
    if (!GrammarCompiler::available()) GTEST_SKIP() << "built without xgrammar";
  }

  // Decodes under the grammar with random logits (a heavy bias toward ending once allowed, so
  // outputs stay short); returns the text before the stop token.
  // `favored` texts get a bias too (free-form values stay short when their closing tokens are likely).
  std::string decode(const TokenConstraint& constraint, uint64_t seed, int max_tokens = 256,
                     const std::vector<std::string>& favored = {}) {
    const int64_t vocab = tokenizer_->vocab_size();
    auto matcher = constraint.new_matcher();
    std::vector<uint32_t> mask(static_cast<size_t>(token_mask_words(vocab)));
    std::vector<float> logits(static_cast<size_t>(vocab));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> normal(0.0f, 3.0f);
    sampling::Sampler sampler(vocab);
    SamplingParams params;
    std::vector<int32_t> out;
    const std::vector<int32_t> stops = tokenizer_->stop_ids();
    for (int i = 0; i < max_tokens; ++i) {
      matcher->fill_next_token_mask(mask);
      for (auto& l : logits) l = normal(rng);
      for (int32_t s : stops) logits[s] = 20.0f;
      for (const std::string& f : favored)
        for (int32_t id : tokenizer_->encode(f, false)) logits[id] = 12.0f;
      sampling::SampleInput in;
      in.logits = logits;
      in.params = &params;
      in.seed = seed;
      in.output_index = i;
      in.allowed_mask = mask;
      const int32_t t = sampler.sample(in).token_id;
      EXPECT_TRUE(matcher->accept_token(t)) << "the grammar refused a token its own mask allowed";
      if (std::find(stops.begin(), stops.end(), t) != stops.end()) {
        EXPECT_TRUE(matcher->is_terminated());
        return tokenizer_->decode(out);
      }
      out.push_back(t);
    }
    ADD_FAILURE() << "no stop token after " << max_tokens << " tokens: " << tokenizer_->decode(out);
    return tokenizer_->decode(out);
  }

  static std::shared_ptr<const Tokenizer> tokenizer_;
  static GrammarCompiler* compiler_;
};

std::shared_ptr<const Tokenizer> GrammarDecoding::tokenizer_;
GrammarCompiler* GrammarDecoding::compiler_ = nullptr;

TEST_F(GrammarDecoding, JsonSchemaOutputsParseAndMatch) {
  const char* schema = R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 6},
      "age": {"type": "integer", "minimum": 0, "maximum": 120},
      "pet": {"enum": ["cat", "dog"]},
      "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}},
    "required": ["name", "age", "pet"]})";
  GrammarSpec spec{GrammarKind::kJsonSchema, schema, {}, true, "response_format"};
  auto constraint = compiler_->compile(spec);
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const std::string text = decode(*constraint, seed);
    const nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << "not JSON: " << text;
    ASSERT_TRUE(v.is_object()) << text;
    ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << text;
    EXPECT_LE(v["name"].get<std::string>().size(), 6u * 4) << text;  // 6 code points
    ASSERT_TRUE(v.contains("age") && v["age"].is_number_integer()) << text;
    EXPECT_GE(v["age"].get<int>(), 0);
    EXPECT_LE(v["age"].get<int>(), 120);
    ASSERT_TRUE(v.contains("pet")) << text;
    EXPECT_TRUE(v["pet"] == "cat" || v["pet"] == "dog") << text;
    for (const auto& [key, value] : v.items())
      EXPECT_TRUE(key == "name" || key == "age" || key == "pet" || key == "tags") << "extra key " << key;
    if (v.contains("tags")) {
      ASSERT_TRUE(v["tags"].is_array());
      EXPECT_LE(v["tags"].size(), 3u);
      for (const auto& t : v["tags"]) EXPECT_TRUE(t.is_boolean());
    }
  }
}

TEST_F(GrammarDecoding, JsonObjectIsAnObject) {
  auto constraint = compiler_->compile({GrammarKind::kJsonObject, "", {}, true, "response_format"});
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const std::string text = decode(*constraint, seed, 400, {"\"", "}", "\":", "1"});
    const nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << "not JSON: " << text;
    EXPECT_TRUE(v.is_object()) << text;
  }
}

TEST_F(GrammarDecoding, RegexOutputsMatch) {
  const std::string pattern = R"([A-Z][a-z]{1,5}-[0-9]{2,3})";
  auto constraint = compiler_->compile({GrammarKind::kRegex, pattern, {}, true, "guided_regex"});
  const std::regex re(pattern);
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const std::string text = decode(*constraint, seed);
    EXPECT_TRUE(std::regex_match(text, re)) << text;
  }
}

TEST_F(GrammarDecoding, ChoiceIsOneOfThem) {
  const std::vector<std::string> choices = {"positive", "negative", "a \"quoted\" one"};
  auto constraint = compiler_->compile({GrammarKind::kChoice, "", choices, true, "guided_choice"});
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const std::string text = decode(*constraint, seed);
    EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
  }
}

TEST_F(GrammarDecoding, EbnfAndLarkGrammars) {
  auto ebnf = compiler_->compile({GrammarKind::kEbnf, R"g(root ::= "(" [0-9] ("+" [0-9])* ")")g", {}, true, "guided_grammar"});
  auto lark = compiler_->compile({GrammarKind::kLark, "start: \"yes\" | \"no\"", {}, true, "guided_grammar"});
  const std::regex sum(R"(\([0-9](\+[0-9])*\))");
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    EXPECT_TRUE(std::regex_match(decode(*ebnf, seed), sum));
    const std::string yn = decode(*lark, seed);
    EXPECT_TRUE(yn == "yes" || yn == "no") << yn;
  }
}

TEST_F(GrammarDecoding, PatternPropertiesAndFormatsAreEnforced) {
  // Every key must match ^x_[0-9]$ with an integer value; the date must be a date.
  const char* schema = R"({"type": "object", "properties": {"when": {"type": "string", "format": "date"}},
    "required": ["when"], "patternProperties": {"^x_[0-9]$": {"type": "integer"}}, "additionalProperties": false})";
  auto constraint = compiler_->compile({GrammarKind::kJsonSchema, schema, {}, true, "response_format"});
  const std::regex key(R"(x_[0-9])"), date(R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))");
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const std::string text = decode(*constraint, seed, 256, {"x_", "\"", "}", "1"});
    const nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(v.is_object()) << text;
    ASSERT_TRUE(v.contains("when") && v["when"].is_string()) << text;
    EXPECT_TRUE(std::regex_match(v["when"].get<std::string>(), date)) << text;
    for (const auto& [k, value] : v.items()) {
      if (k == "when") continue;
      EXPECT_TRUE(std::regex_match(k, key)) << "key " << k << " in " << text;
      EXPECT_TRUE(value.is_number_integer()) << text;
    }
  }
}

TEST_F(GrammarDecoding, EngineErrorsComeBackShortAndWithoutSourcePaths) {
  // A grammar of 24 KB the engine cannot parse (its message may quote all of it).
  std::string big = "root ::= ";
  for (int i = 0; i < 6000; ++i) big += "\"a\" ";
  big += "| ( ";  // unbalanced at the very end
  try {
    compiler_->compile({GrammarKind::kEbnf, big, {}, true, "guided_grammar"});
    FAIL() << "compiled";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_LT(message.size(), 700u) << message.substr(0, 1000);
    EXPECT_EQ(message.find(".cc:"), std::string::npos) << message;
    EXPECT_EQ(message.rfind("guided_grammar: ", 0), 0u) << message;
  }
}

TEST_F(GrammarDecoding, BadGrammarsNameTheirField) {
  auto message = [&](GrammarSpec spec) -> std::string {
    try {
      compiler_->compile(spec);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "<compiled>";
  };
  EXPECT_NE(message({GrammarKind::kRegex, "([a-z", {}, true, "guided_regex"}).find("guided_regex"), std::string::npos);
  EXPECT_NE(message({GrammarKind::kEbnf, "root ::= ", {}, true, "guided_grammar"}).find("guided_grammar"),
            std::string::npos);
  EXPECT_NE(message({GrammarKind::kJsonSchema, "{\"type\": 12}", {}, true, "response_format"}).find("response_format"),
            std::string::npos);
  EXPECT_NE(message({GrammarKind::kChoice, "", {}, true, "guided_choice"}).find("guided_choice"), std::string::npos);
}

// A grammar whose language is empty would leave the sampler an empty mask at the first token:
// it is refused at compile time. (One that dead-ends later, a JSON string whose pattern
// matches nothing, compiles; the engine ends its sequence there: GrammarThroughEngine.) The
// empty text is a language of its own: the output ends at once.
TEST_F(GrammarDecoding, AGrammarThatMatchesNoTextIsRefused) {
  const GrammarSpec empty_languages[] = {
      {GrammarKind::kRegex, R"([^\s\S])", {}, true, "guided_regex"},
      {GrammarKind::kRegex, R"([^\s\S]+|[^\w\W]*[^\d\D])", {}, true, "guided_regex"},
      {GrammarKind::kEbnf, R"(root ::= [^\x00-\U0010FFFF])", {}, true, "guided_grammar"},
  };
  for (const GrammarSpec& spec : empty_languages) {
    try {
      compiler_->compile(spec);
      ADD_FAILURE() << spec.text << ": compiled";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(std::string(e.what()).rfind(spec.field + ": the " + grammar_kind_name(spec.kind) + " matches no text", 0), 0u)
          << e.what();
    }
  }
  auto only_empty = compiler_->compile({GrammarKind::kChoice, "", {""}, true, "guided_choice"});
  EXPECT_EQ(decode(*only_empty, 1), "");
}

}  // namespace
}  // namespace optimate::structured
