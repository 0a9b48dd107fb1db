#include "structured/grammar_spec.h"

namespace optimate::structured {

const char* grammar_kind_name(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kJsonSchema: return "json_schema";
    case GrammarKind::kJsonObject: return "json_object";
    case GrammarKind::kRegex: return "regex";
    case GrammarKind::kChoice: return "choice";
    case GrammarKind::kEbnf: return "grammar";
    case GrammarKind::kLark: return "lark grammar";
    case GrammarKind::kStructuralTag: return "structural_tag";
  }
  return "?";
}

}  // namespace optimate::structured
