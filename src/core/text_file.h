// A whole file read for its text (a command's --file): a missing file, a folder or an unreadable
// file is an Error naming the flag and the path, never a stream exception.
#pragma once

#include <string>
#include <string_view>

namespace optimate {

std::string read_text_file(const std::string& path, std::string_view flag);

}  // namespace optimate
