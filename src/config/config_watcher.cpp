#include "config/config_watcher.h"

#include <functional>
#include <optional>

#include "config/engine_config.h"
#include "core/error.h"
#include "core/text_file.h"

namespace optimate {
namespace {

// nullopt for what load_engine_config_file would refuse to read (a FIFO is never opened to wait
// for a writer: this runs on the thread that handles signals).
std::optional<size_t> content_hash(const std::string& path) {
  try {
    return std::hash<std::string>{}(read_regular_file(path, path, kMaxConfigFileBytes));
  } catch (const Error&) {
    return std::nullopt;
  }
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
