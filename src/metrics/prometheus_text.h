// Pieces of the Prometheus text exposition format 0.0.4: number formatting, escaping, name rules.
//
// Numbers are written the way the official Python client writes them (the format vLLM's
// /metrics serves), so dashboards and tests that compare text see the same strings: shortest
// round-trip digits, "1.0" rather than "1", exponent form below 1e-4 and from 1e6 up, and
// "+Inf", "-Inf", "NaN" for the special values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace optimate::metrics {

void append_value(std::string& out, double value);
std::string format_value(double value);

// HELP text escapes backslash and newline; label values also escape the double quote.
void append_escaped_help(std::string& out, std::string_view help);
void append_escaped_label_value(std::string& out, std::string_view value);

// `{a="x",b="y"}` sorted by name, or nothing when there are no labels. `extra_name` and
// `extra_value` add one more pair (a histogram bucket's `le`) without copying the label set.
void append_labels(std::string& out, const std::vector<std::string>& names,
                   const std::vector<std::string>& values, std::string_view extra_name = {},
                   std::string_view extra_value = {});

// [a-zA-Z_:][a-zA-Z0-9_:]* for metric names; label names allow no colon and may not start
// with "__" (reserved for Prometheus itself).
bool is_valid_metric_name(std::string_view name);
bool is_valid_label_name(std::string_view name);

}  // namespace optimate::metrics
