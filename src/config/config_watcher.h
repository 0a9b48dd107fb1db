// Notices when a configuration file changes, by content: `optimate serve --config FILE`
// polls it and reloads when it differs from what was last seen. An editor's write-then-rename
// and an in-place write both show up; a file caught half-written is read again at the next
// poll (and rejected whole if it does not parse, changing nothing).
#pragma once

#include <cstddef>
#include <string>

namespace optimate {

class ConfigWatcher {
 public:
  // Remembers the file's current content.
  explicit ConfigWatcher(std::string path);
  // True once per change of content since the last call that returned true (or construction);
  // false while the file cannot be read.
  bool changed();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool readable_ = false;
  size_t hash_ = 0;
};

}  // namespace optimate
