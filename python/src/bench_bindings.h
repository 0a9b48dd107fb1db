// The benchmark's workload generator and step-time model for Python: what a benchmark written
// in Python (benchmarks/vllm_plugin_sim.py) needs to load the same workloads and price steps
// as `optimate bench --backend sim` does.
#pragma once

#include <nanobind/nanobind.h>

namespace optimate::python {

void bind_bench(nanobind::module_& m);

}  // namespace optimate::python
