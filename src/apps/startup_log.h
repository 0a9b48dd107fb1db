// What `optimate serve` states at start (seed section 5.4: the optimizers' start and their
// configuration): every optimizer that is on with all its options (the ones given and the
// defaults it runs with), the baselines in the other slots, and the KV cache the engine planned.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"

namespace optimate::apps {

// One line each, in the order they are logged.
std::vector<std::string> startup_summary(const Engine& engine);

}  // namespace optimate::apps
