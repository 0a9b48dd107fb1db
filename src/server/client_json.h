// The one parser for JSON that comes from a client: request bodies, and JSON given as text
// inside a field (a schema, a structural tag, tool-call arguments), and tool calls read back
// from the model's output. Built on nlohmann's SAX interface, it is linear in the input:
// an object's members go straight into its ordered storage (nlohmann's ordered_json inserts
// with a search per key, quadratic in the keys), and a duplicate key is found with a hash
// map (the last value wins, in the first key's place, as Python's json and pydantic do).
//
// It bounds what later code may meet: nesting deeper than kMaxJsonDepth or an object with
// more than kMaxJsonMembers members is refused while parsing, so no recursive walk over a
// parsed value (dump, comparison, schema conversion) can run deeper than the bound.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "server/json_fields.h"

namespace optimate::server {

// Arrays and objects nested inside one another, the outermost counting 1. Tool schemas sit
// about five levels below the body's top; a schema nested this deep is far past what the
// grammar engine compiles in reasonable time anyway (structured/schema_check.h).
inline constexpr int kMaxJsonDepth = 128;
// Members of one object: above any vocabulary's logit_bias, far below what 8 MiB can hold.
inline constexpr size_t kMaxJsonMembers = size_t{1} << 18;

struct ClientJsonError {
  std::string message;  // says what is wrong and where; quotes none of the input
  bool over_bound = false;  // valid so far, but nested too deep or an object too large
  // The top-level member the error is inside ("" when it is not inside one), for a body.
  std::string top_level_key;
};

// The parsed value, or nullopt with `error` filled. Invalid UTF-8 inside strings is an error.
std::optional<Json> try_parse_client_json(std::string_view text, ClientJsonError* error = nullptr);

// Parses JSON given inside the request field `field`: a 400 naming it when the text is not
// JSON or passes the bounds.
Json parse_field_json(std::string_view text, const std::string& field);

// Parses a request body: malformed JSON (invalid UTF-8 in strings too) is a 400, one past the
// bounds a 400 naming the top-level member it is in; the top level must be an object.
Json parse_json_body(const std::string& body);

}  // namespace optimate::server
