#include "config/config_watcher.h"

#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

namespace optimate {
namespace {

std::optional<size_t> content_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return std::hash<std::string>{}(text.str());
}

}  // namespace

ConfigWatcher::ConfigWatcher(std::string path) : path_(std::move(path)) {
  if (const auto h = content_hash(path_)) {
    readable_ = true;
    hash_ = *h;
  }
}

bool ConfigWatcher::changed() {
  const auto h = content_hash(path_);
  if (!h) return false;
  const bool differs = !readable_ || *h != hash_;
  readable_ = true;
  hash_ = *h;
  return differs;
}

}  // namespace optimate
