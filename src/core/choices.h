// A value that is one of a few names (--device, --kv-cache-dtype, --priority-order): each such
// enum has one table of the names it accepts, next to the enum, and the settings, the command
// line, the TOML reader and writer, error messages and display all read that table. A value's
// first name is how it prints; later names of the same value are accepted spellings. Free of
// fmt (the failure is raised out of line), so CUDA sources may include it.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace optimate {

// Error(kInvalidArgument) "<what> must be <choices>, got '<text>'".
[[noreturn]] void fail_unknown_choice(std::string_view what, std::string_view choices, std::string_view text);

template <typename T>
struct ChoiceName {
  T value;
  std::string_view name;
};

// Specialized once per enum with `static constexpr ChoiceName<T> names[]`.
template <typename T>
struct Choices;

template <typename T>
concept Choice = requires { Choices<T>::names; };

template <Choice T>
constexpr std::string_view choice_name(T value) {
  for (const ChoiceName<T>& c : Choices<T>::names)
    if (c.value == value) return c.name;
  return "?";
}

// Every accepted name: "auto, cpu or cuda".
template <Choice T>
std::string choice_list() {
  const std::span<const ChoiceName<T>> names(Choices<T>::names);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i].name;
  }
  return out;
}

// The value named `text`; Error(kInvalidArgument) "<what> must be <every name>, got '<text>'".
template <Choice T>
T parse_choice(std::string_view text, std::string_view what) {
  for (const ChoiceName<T>& c : Choices<T>::names)
    if (c.name == text) return c.value;
  fail_unknown_choice(what, choice_list<T>(), text);
}

}  // namespace optimate
