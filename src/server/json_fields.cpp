#include "server/json_fields.h"

#include <cmath>
#include <limits>

#include "server/api_error.h"

namespace optimate::server {

namespace {

const Json* find(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

const char* type_name(const Json& v) {
  return v.is_string() ? "a string" : v.is_boolean() ? "a boolean" : v.is_array() ? "an array"
       : v.is_object() ? "an object" : "a number";
}

}  // namespace

int64_t as_int(const Json& v, const std::string& name) {
  // Unsigned first: is_number_integer() holds for unsigned values too, and 2^64 - 1 read as
  // int64 would be -1.
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad_request(name, "{} is out of range: {}", name, u);
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    // 2^63 is the first double past int64's range; -2^63 is where an integer below int64's
    // range rounds to as a double, so it is refused too (int64's least value as written is an
    // integer, not a double).
    if (!std::isfinite(d) || std::trunc(d) != d || d <= -9.2233720368547758e18 || d >= 9.2233720368547758e18)
      bad_request(name, "{} must be an integer, got {}", name, v.dump());
    return static_cast<int64_t>(d);
  }
  bad_request(name, "{} must be an integer, got {}", name, type_name(v));
}

std::optional<int64_t> get_int(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (!v) return std::nullopt;
  return as_int(*v, name);
}

std::optional<double> get_number(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_request(name, "{} must be a number, got {}", name, type_name(*v));
  double d = v->get<double>();
  if (!std::isfinite(d)) bad_request(name, "{} must be finite", name);
  return d;
}

std::optional<bool> get_bool(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_request(name, "{} must be a boolean, got {}", name, type_name(*v));
  return v->get<bool>();
}

std::optional<std::string> get_string(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_request(name, "{} must be a string, got {}", name, type_name(*v));
  return v->get<std::string>();
}

std::vector<std::string> get_string_or_strings(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) bad_request(name, "{} must be a string or a list of strings", name);
  std::vector<std::string> out;
  for (const auto& item : *v) {
    if (!item.is_string()) bad_request(name, "{} must be a string or a list of strings", name);
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::optional<std::vector<int64_t>> get_int_list(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (!v) return std::nullopt;
  if (!v->is_array()) bad_request(name, "{} must be a list of integers", name);
  std::vector<int64_t> out;
  out.reserve(v->size());
  for (const auto& item : *v) out.push_back(as_int(item, name));
  return out;
}

const Json* get_object(const Json& object, const char* name) {
  const Json* v = find(object, name);
  if (v && !v->is_object()) bad_request(name, "{} must be an object", name);
  return v;
}

}  // namespace optimate::server
