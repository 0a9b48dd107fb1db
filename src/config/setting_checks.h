// The rules a setting's value must follow (the `check` column of engine_settings.def): a
// predicate and the words that say what it wants, for the error message.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <fmt/format.h>

namespace optimate {

template <typename T>
struct Check {
  std::function<bool(const T&)> ok;
  std::string rule;  // completes "max-num-seqs must be ...", e.g. "at least 1"
};

template <typename T>
Check<T> any() {
  return {[](const T&) { return true; }, "any value"};
}

template <typename T>
Check<T> at_least(T low) {
  return {[low](const T& v) { return v >= low; },
          low == T{0} ? std::string("non-negative") : fmt::format("at least {}", low)};
}

inline Check<int64_t> in_range(int64_t low, int64_t high) {
  return {[=](const int64_t& v) { return v >= low && v <= high; }, fmt::format("in [{}, {}]", low, high)};
}

inline Check<double> in_open_closed(double low, double high) {
  return {[=](const double& v) { return v > low && v <= high; }, fmt::format("in ({}, {}]", low, high)};
}

inline Check<double> in_closed(double low, double high) {
  return {[=](const double& v) { return v >= low && v <= high; }, fmt::format("in [{}, {}]", low, high)};
}

inline Check<int64_t> power_of_two(int64_t low, int64_t high) {
  return {[=](const int64_t& v) { return v >= low && v <= high && (v & (v - 1)) == 0; },
          fmt::format("a power of two in [{}, {}]", low, high)};
}

}  // namespace optimate
