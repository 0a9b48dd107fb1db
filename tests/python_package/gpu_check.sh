#!/usr/bin/env bash
# The Python package on a GPU machine: configures BUILD_DIR with the project's virtual
# environment (scripts/setup.sh made it; it carries nanobind), builds `optimate` and the
# extension with the CUDA backend, and runs tests/python_package/test_gpu.py plus the CPU suite.
#   tests/python_package/gpu_check.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: tests/python_package/gpu_check.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${OPTIMATE_VENV:-$root/.venv}
if ! "$venv/bin/python" -m nanobind --cmake_dir >/dev/null 2>&1; then
  echo "SKIPPED: $venv has no nanobind (run scripts/setup.sh on a machine with PyPI and carry .venv)"
  exit 0
fi
export PATH=/usr/local/cuda/bin:$PATH
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPTIMATE_CUDA=ON \
  -DOPTIMATE_PYTHON=ON -DPython_EXECUTABLE="$venv/bin/python"
cmake --build "$build" -j "$(nproc)" --target optimate optimate_python
OPTIMATE_TEST_GPU=1 OPTIMATE_BUILD_DIR="$build" "$root/tests/python_package/run.sh" -k "gpu or generate_matches or seed" -rs
