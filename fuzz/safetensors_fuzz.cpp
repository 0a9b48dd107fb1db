// libFuzzer target: SafetensorsFile::parse on arbitrary bytes, then every tensor widened to
// fp32. Any outcome but success or optimate::Error is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "model/safetensors_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace optimate;
  try {
    const auto file =
        SafetensorsFile::parse(std::span<const uint8_t>(data, size), "fuzz.safetensors");
    for (const auto& name : file->tensor_names()) (void)to_f32(file->tensor(name));
  } catch (const Error&) {
  }
  return 0;
}
