#include "engine/decision_log.h"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace optimate {
namespace {

nlohmann::json number(double v) {
  // JSON has no NaN or infinity; a figure that has none is null.
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

std::string decision_json(const DecisionRecord& r) {
  nlohmann::ordered_json j;
  j["t_s"] = number(r.t_s);
  j["event"] = r.event;
  j["optimizer"] = r.optimizer;
  j["reason"] = r.reason;
  for (const auto& [key, value] : r.fields) {
    std::visit([&, k = key](const auto& v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>) j[k] = number(v);
      else j[k] = v;
    }, value);
  }
  if (!r.figures.empty()) {
    nlohmann::ordered_json f = nlohmann::ordered_json::object();
    for (const auto& [key, value] : r.figures) f[key] = number(value);
    j["figures"] = std::move(f);
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::function<void(std::string_view line)> open_line_file(const std::string& path, bool append,
                                                          std::string_view what) {
  auto out = std::make_shared<std::ofstream>(path, append ? std::ios::app : std::ios::trunc);
  if (!*out) fail(ErrorCode::kNotFound, "cannot open {} {} for writing", what, path);
  return [out](std::string_view line) {
    out->write(line.data(), static_cast<std::streamsize>(line.size()));
    out->put('\n');
    out->flush();
  };
}

std::shared_ptr<DecisionLog> DecisionLog::open_file(const std::string& path) {
  return std::make_shared<DecisionLog>(open_line_file(path, /*append=*/true, "decision log"));
}

void DecisionLog::write(const DecisionRecord& record) {
  const std::string line = decision_json(record);
  std::lock_guard lock(mu_);
  writer_(line);
}

}  // namespace optimate
