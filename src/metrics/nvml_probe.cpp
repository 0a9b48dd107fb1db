#include "metrics/nvml_probe.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <string_view>

namespace optimate::metrics {
namespace {

// The few NVML declarations used (nvml.h, stable since CUDA 5), so no header is needed.
using NvmlReturn = int;  // nvmlReturn_t
constexpr NvmlReturn kNvmlSuccess = 0;
using NvmlDevice = struct NvmlDeviceOpaque*;  // nvmlDevice_t
struct NvmlUtilization {                      // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

class NvmlProbe final : public GpuProbe {
 public:
  explicit NvmlProbe(void* library) : library_(library) {}
  ~NvmlProbe() override {
    if (initialized_) shutdown_();
    dlclose(library_);
  }

  // Resolves the functions and opens the device; "" on success, else why not.
  std::string open(const GpuSelector& selector) {
    if (!resolve(init_, "nvmlInit_v2") || !resolve(shutdown_, "nvmlShutdown") ||
        !resolve(error_string_, "nvmlErrorString") || !resolve(by_index_, "nvmlDeviceGetHandleByIndex_v2") ||
        !resolve(by_uuid_, "nvmlDeviceGetHandleByUUID") || !resolve(name_, "nvmlDeviceGetName") ||
        !resolve(utilization_, "nvmlDeviceGetUtilizationRates") || !resolve(memory_, "nvmlDeviceGetMemoryInfo"))
      return "libnvidia-ml lacks " + missing_;
    if (NvmlReturn rc = init_(); rc != kNvmlSuccess) return fmt::format("nvmlInit failed: {}", error_string_(rc));
    initialized_ = true;
    const NvmlReturn rc =
        selector.uuid.empty() ? by_index_(selector.index, &device_) : by_uuid_(selector.uuid.c_str(), &device_);
    const std::string which = selector.uuid.empty() ? fmt::format("NVML index {}", selector.index) : selector.uuid;
    if (rc != kNvmlSuccess) return fmt::format("no GPU {}: {}", which, error_string_(rc));
    char name[96] = {};
    name_desc_ = (name_(device_, name, sizeof name) == kNvmlSuccess ? std::string(name) : "GPU") + " (" + which + ")";
    return "";
  }

  std::string device() const override { return name_desc_; }

  std::optional<GpuReading> read() override {
    NvmlUtilization u{};
    NvmlMemory m{};
    if (utilization_(device_, &u) != kNvmlSuccess || memory_(device_, &m) != kNvmlSuccess) return std::nullopt;
    return GpuReading{double(u.gpu), double(m.used), double(m.total)};
  }

 private:
  template <typename F>
  bool resolve(F& fn, const char* symbol) {
    fn = reinterpret_cast<F>(dlsym(library_, symbol));
    if (!fn) missing_ = symbol;
    return fn != nullptr;
  }

  void* library_;
  bool initialized_ = false;
  std::string missing_, name_desc_;
  NvmlDevice device_ = nullptr;
  NvmlReturn (*init_)() = nullptr;
  NvmlReturn (*shutdown_)() = nullptr;
  const char* (*error_string_)(NvmlReturn) = nullptr;
  NvmlReturn (*by_index_)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*by_uuid_)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*name_)(NvmlDevice, char*, unsigned int) = nullptr;
  NvmlReturn (*utilization_)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*memory_)(NvmlDevice, NvmlMemory*) = nullptr;
};

}  // namespace

GpuSelector parse_visible_devices(const char* cuda_visible_devices) {
  GpuSelector out;
  if (!cuda_visible_devices) return out;
  std::string_view first(cuda_visible_devices);
  first = first.substr(0, first.find(','));
  while (!first.empty() && first.front() == ' ') first.remove_prefix(1);
  while (!first.empty() && first.back() == ' ') first.remove_suffix(1);
  if (first.starts_with("GPU-") || first.starts_with("MIG-")) {
    out.uuid = std::string(first);
    return out;
  }
  // CUDA stops at the first entry that is not a device: such a list exposes no GPU.
  unsigned index = 0;
  const auto [end, ec] = std::from_chars(first.data(), first.data() + first.size(), index);
  out.none = first.empty() || ec != std::errc() || end != first.data() + first.size();
  out.index = out.none ? 0 : index;
  return out;
}

NvmlOpen open_nvml(const GpuSelector& selector, const std::string& library) {
  if (selector.none) return {nullptr, "CUDA_VISIBLE_DEVICES exposes no GPU"};
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return {nullptr, fmt::format("NVML unavailable: {}", why ? why : library + " cannot be loaded")};
  }
  auto probe = std::make_unique<NvmlProbe>(handle);
  if (std::string why = probe->open(selector); !why.empty()) return {nullptr, why};
  return {std::move(probe), ""};
}

NvmlOpen open_process_gpu() { return open_nvml(parse_visible_devices(std::getenv("CUDA_VISIBLE_DEVICES"))); }

}  // namespace optimate::metrics
