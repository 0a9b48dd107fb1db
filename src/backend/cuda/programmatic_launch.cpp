#include "backend/cuda/programmatic_launch.h"

#include <atomic>

#include "backend/cuda/kernel_paths.h"

namespace optimate::cuda {
namespace {
std::atomic<bool> g_programmatic_launch{true};
}  // namespace

bool programmatic_launch_enabled() {
  return g_programmatic_launch.load(std::memory_order_relaxed) && device_kernel_paths().programmatic_launch;
}
void set_programmatic_launch(bool enabled) { g_programmatic_launch.store(enabled, std::memory_order_relaxed); }

}  // namespace optimate::cuda
