// What a grammar costs to compile, by the shape a client controls: JSON schemas nested ever
// deeper (objects, arrays), enums, objects and anyOf lists ever longer, choice lists and
// regexes ever longer. Over SmolLM2's vocabulary (49,152 tokens), one compile per point,
// xgrammar's own cache off. Each series stops once a compile takes longer than --stop-s.
// The limits of structured/grammar_limits.h were chosen from these figures
// (docs/openai-compatibility.md records them).
//   build/benchmarks/grammar_compile_bench [--stop-s 4]
//   build/benchmarks/grammar_compile_bench --regex TEXT | --ebnf TEXT | --schema TEXT   (one grammar)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "structured/grammar_compiler.h"
#include "tokenizer/tokenizer.h"

using optimate::structured::GrammarCompiler;
using optimate::structured::GrammarKind;
using optimate::structured::GrammarSpec;

namespace {

std::string nested_objects(int depth) {
  std::string s = R"({"type": "string"})";
  for (int i = 0; i < depth; ++i)
    s = R"({"type": "object", "properties": {"a": )" + s + R"(}, "required": ["a"]})";
  return s;
}

std::string nested_arrays(int depth) {
  std::string s = R"({"type": "integer"})";
  for (int i = 0; i < depth; ++i) s = R"({"type": "array", "items": )" + s + "}";
  return s;
}

std::string enum_of(int n) {
  std::string s = R"({"enum": [)";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::string("\"value") + std::to_string(i) + "\"";
  return s + "]}";
}

std::string object_with(int n) {
  std::string props, required;
  for (int i = 0; i < n; ++i) {
    props += (i ? ", " : "") + std::string("\"p") + std::to_string(i) + R"(": {"type": "integer"})";
    required += (i ? ", " : "") + std::string("\"p") + std::to_string(i) + "\"";
  }
  return R"({"type": "object", "properties": {)" + props + R"(}, "required": [)" + required + "]}";
}

std::string any_of(int n) {
  std::string s = R"({"anyOf": [)";
  for (int i = 0; i < n; ++i)
    s += (i ? ", " : "") + std::string(R"({"type": "object", "properties": {"k)") + std::to_string(i) +
         R"(": {"type": "string"}}, "required": ["k)" + std::to_string(i) + R"("]})";
  return s + "]}";
}

std::string regex_of(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "[a-z]{1,3}-";
  return s;
}

struct Series {
  const char* name;
  std::vector<int> sizes;
  std::function<GrammarSpec(int)> spec;
};

GrammarSpec schema(std::string text) { return {GrammarKind::kJsonSchema, std::move(text), {}, true, "bench"}; }

}  // namespace

int main(int argc, char** argv) {
  double stop_s = 4.0;
  std::vector<GrammarSpec> one;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--stop-s")) stop_s = std::stod(argv[i + 1]);
    if (!std::strcmp(argv[i], "--regex")) one.push_back({GrammarKind::kRegex, argv[i + 1], {}, true, "regex"});
    if (!std::strcmp(argv[i], "--ebnf")) one.push_back({GrammarKind::kEbnf, argv[i + 1], {}, true, "ebnf"});
    if (!std::strcmp(argv[i], "--schema")) one.push_back(schema(argv[i + 1]));
  }
  if (!GrammarCompiler::available()) {
    std::fprintf(stderr, "built without xgrammar\n");
    return 1;
  }
  auto tokenizer = optimate::Tokenizer::load(std::string(OPTIMATE_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf");
  optimate::structured::Vocabulary v;
  v.vocab_size = tokenizer->vocab_size();
  for (int32_t id = 0; id < tokenizer->vocab_size(); ++id)
    v.tokens.push_back(tokenizer->is_special(id) ? std::string() : tokenizer->id_to_token(id));
  v.stop_token_ids = tokenizer->stop_ids();
  GrammarCompiler compiler(v);

  for (const GrammarSpec& spec : one) {
    const auto start = std::chrono::steady_clock::now();
    try {
      compiler.compile(spec);
      std::printf("compiled");
    } catch (const std::exception& e) {
      std::printf("error: %s", e.what());
    }
    std::printf(" in %.3f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  if (!one.empty()) return 0;

  const std::vector<Series> series = {
      {"schema: nested objects (depth)", {8, 16, 32, 48, 64, 96, 128, 256}, [](int n) { return schema(nested_objects(n)); }},
      {"schema: nested arrays (depth)", {8, 16, 32, 64, 96, 128, 256}, [](int n) { return schema(nested_arrays(n)); }},
      {"schema: enum (values)", {100, 1000, 4000, 6000, 8000, 12000, 16000}, [](int n) { return schema(enum_of(n)); }},
      {"schema: object (properties)", {100, 500, 1000, 2000, 4000}, [](int n) { return schema(object_with(n)); }},
      {"schema: anyOf (branches)", {16, 128, 512, 1024, 2048, 4096}, [](int n) { return schema(any_of(n)); }},
      {"choice (strings)", {100, 1000, 4000, 6000, 8000, 12000, 16000}, [](int n) {
         GrammarSpec s{GrammarKind::kChoice, "", {}, true, "bench"};
         for (int i = 0; i < n; ++i) s.choices.push_back("choice" + std::to_string(i));
         return s;
       }},
      {"regex (repeated groups)", {16, 64, 256, 1024, 4096}, [](int n) {
         return GrammarSpec{GrammarKind::kRegex, regex_of(n), {}, true, "bench"};
       }},
  };
  std::printf("| series | size | schema bytes | compile s |\n|---|---|---|---|\n");
  for (const Series& s : series) {
    for (int n : s.sizes) {
      const GrammarSpec spec = s.spec(n);
      size_t bytes = spec.text.size();
      for (const auto& c : spec.choices) bytes += c.size() + 3;
      const auto start = std::chrono::steady_clock::now();
      std::string outcome;
      try {
        compiler.compile(spec);
      } catch (const std::exception& e) {
        outcome = " (error)";
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("| %s | %d | %zu | %.3f%s |\n", s.name, n, bytes, seconds, outcome.c_str());
      std::fflush(stdout);
      if (seconds > stop_s) break;
    }
  }
  return 0;
}
