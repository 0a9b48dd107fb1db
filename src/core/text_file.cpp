#include "core/text_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace optimate {

std::string read_text_file(const std::string& path, std::string_view flag) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) fail(ErrorCode::kNotFound, "{} {}: no such file", flag, path);
  if (std::filesystem::is_directory(status)) fail(ErrorCode::kInvalidArgument, "{} {}: is a folder, not a file", flag, path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::kNotFound, "{} {}: cannot open", flag, path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(ErrorCode::kInvalidArgument, "{} {}: cannot read", flag, path);
  return text.str();
}

}  // namespace optimate
