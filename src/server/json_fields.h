// Typed access to fields of a JSON request body. A missing field or an explicit null means
// "use the default" (vLLM's pydantic models take null so for their optional fields and refuse
// it for the few others: n, min_tokens, echo, ...); a value of the wrong type or out of range
// is a 400 naming the field. Values convert as pydantic's lax mode (vLLM's request models)
// converts them: integral floats (5.0) and strings holding an integer ("5", " 1_000 ", "5.0")
// count as integers, strings holding a number as numbers (white space as Unicode defines it
// around either), booleans as 0 and 1, and 0, 1 and the strings true/false, yes/no, on/off,
// t/f, y/n, 1/0 (any case) as booleans.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace optimate::server {

// Objects keep their keys in the order the client wrote them: a JSON schema's properties are
// generated in that order, and tools are shown to the model as written.
using Json = nlohmann::ordered_json;

std::optional<int64_t> get_int(const Json& object, const char* name);
std::optional<double> get_number(const Json& object, const char* name);
std::optional<bool> get_bool(const Json& object, const char* name);
std::optional<std::string> get_string(const Json& object, const char* name);
// A string or an array of strings (`stop`); absent gives an empty list.
std::vector<std::string> get_string_or_strings(const Json& object, const char* name);
std::optional<std::vector<int64_t>> get_int_list(const Json& object, const char* name);
// An object or absent; anything else is a 400.
const Json* get_object(const Json& object, const char* name);

// Converts a JSON value to int64 or throws a 400 naming `name`.
int64_t as_int(const Json& value, const std::string& name);
// Converts a JSON value to a finite number or throws a 400 naming `name`.
double as_number(const Json& value, const std::string& name);

}  // namespace optimate::server
