// A whole file read for its text (a command's --file, a configuration file): a missing file, a
// folder, a pipe or a device, a file past the size bound or an unreadable one is an Error naming
// it, never a stream exception, and never a read that blocks (a FIFO) or has no end (/dev/zero).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace optimate {

// `name` begins every message ("--file x.txt", "config file a.toml"). Folders are
// ErrorCode::kInvalidArgument, a missing file kNotFound, the rest kInvalidFile.
std::string read_regular_file(const std::string& path, std::string_view name, size_t max_bytes);

// A command's --file: at most kMaxTextFileBytes.
inline constexpr size_t kMaxTextFileBytes = size_t{1} << 30;
std::string read_text_file(const std::string& path, std::string_view flag);

}  // namespace optimate
