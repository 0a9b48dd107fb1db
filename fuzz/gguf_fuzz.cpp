// libFuzzer target: GgufFile::parse on arbitrary bytes, then every accessor a loader would use.
// Any outcome but success or optimate::Error (a crash, a sanitizer report, an out-of-memory) is
// a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "model/gguf_file.h"
#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace optimate;
  try {
    const auto file = GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
    for (const auto& info : file->tensor_infos()) {
      const HostTensor t = file->tensor(info.name);
      if (t.data.size() <= (size_t{1} << 16) && t.dtype != DType::kI8 && t.dtype != DType::kI32) {
        (void)to_f32(t);
      }
    }
    (void)model_config_from_gguf(*file);
  } catch (const Error&) {
  }
  return 0;
}
