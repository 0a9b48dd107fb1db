#include "metrics/process_usage.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace optimate::metrics {
namespace {

double seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; }

// A "Name:   123 kB" line of /proc/self/status, in bytes; -1 when absent.
double status_kib(const std::string& name) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + ":", 0) == 0) return std::stod(line.substr(name.size() + 1)) * 1024.0;
  return -1.0;
}

}  // namespace

std::optional<ProcessUsage> read_process_usage() {
  ProcessUsage u;
  rusage r{};
  if (getrusage(RUSAGE_SELF, &r) != 0) return std::nullopt;
  u.cpu_seconds = seconds(r.ru_utime) + seconds(r.ru_stime);
  const double rss = status_kib("VmRSS"), peak = status_kib("VmHWM");
  if (rss < 0 || peak < 0) return std::nullopt;
  u.resident_bytes = rss;
  u.peak_resident_bytes = peak;
  cpu_set_t set;
  CPU_ZERO(&set);
  u.num_cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
  return u;
}

bool reset_peak_resident() {
  std::ofstream out("/proc/self/clear_refs");
  return static_cast<bool>(out << "5" << std::flush);
}

}  // namespace optimate::metrics
