// What `optimate serve` states at start (seed section 5.4: the optimizers' start and their
// configuration): every optimizer that is on with all its options (the ones given and the
// defaults it runs with), the baselines in the other slots, and the KV cache the engine planned,
// with the lines vLLM states of its size and concurrency.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"

namespace optimate::apps {

// One line each, in the order they are logged; `device` ("cuda" or "cpu") names the KV cache
// in vLLM's lines of its size and concurrency (engine/kv_cache_report.h).
std::vector<std::string> startup_summary(const Engine& engine, const std::string& device);

}  // namespace optimate::apps
