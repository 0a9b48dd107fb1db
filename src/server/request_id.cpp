#include "server/request_id.h"

#include <random>

#include <fmt/format.h>

namespace optimate::server {

std::string random_request_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string out(prefix);
  for (int i = 0; i < 2; ++i) out += fmt::format("{:016x}", rng());
  return out;
}

}  // namespace optimate::server
