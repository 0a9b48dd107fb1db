// Draws of the workload's random quantities: arrival offsets and token lengths.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/random.h"
#include "bench/workload.h"

namespace optimate::bench {

// Offsets in seconds from the start, non-decreasing, for `count` requests. Closed loop and
// offline give zeros (closed-loop send times are decided while running). kTrace is not drawn.
std::vector<double> draw_arrivals(const ArrivalSpec& spec, int64_t count, Random& rng);

int64_t draw_length(const LengthSpec& spec, Random& rng);

// Throws Error(kInvalidArgument) naming `field` (e.g. "workload.prompt") when out of range.
// The most tokens a drawn length may be: past any model's context, and bounded so that a
// workload's random prompts are never built beyond memory.
inline constexpr int64_t kMaxDrawnLength = int64_t{1} << 24;
void validate_length_spec(const LengthSpec& spec, const char* field);
void validate_arrival_spec(const ArrivalSpec& spec);

// Independent streams per quantity, so changing the prompt distribution leaves the arrival
// times of the same seed unchanged.
uint64_t derive_seed(uint64_t seed, uint64_t stream);

}  // namespace optimate::bench
