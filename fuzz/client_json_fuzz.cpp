// libFuzzer target: request bodies through the server's JSON parser and request parsing
// (completions and chat, structured outputs, tools). Nothing may crash whatever the body;
// a parsed body stays within the depth and member bounds, and reads back as it was written.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "server/api_error.h"
#include "server/client_json.h"
#include "server/openai_request.h"

namespace {

using optimate::server::Json;

int depth_of(const Json& v) {
  if (!v.is_structured()) return 0;
  int deepest = 0;
  for (const auto& item : v) deepest = std::max(deepest, depth_of(item));
  return deepest + 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace optimate::server;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = try_parse_client_json(text);
  if (!parsed) return 0;
  if (depth_of(*parsed) > kMaxJsonDepth) __builtin_trap();
  // What it parsed reads back the same (dump, then the same parser).
  auto again = try_parse_client_json(parsed->dump(-1, ' ', false, Json::error_handler_t::replace));
  if (!again || *again != *parsed) __builtin_trap();
  if (!parsed->is_object()) return 0;
  try {
    parse_completion_request(*parsed, 256);
  } catch (const ApiError&) {
  } catch (const optimate::Error&) {
  }
  try {
    parse_chat_request(*parsed, 256);
  } catch (const ApiError&) {
  } catch (const optimate::Error&) {
  }
  return 0;
}
