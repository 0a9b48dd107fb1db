#!/usr/bin/env bash
# The whole CPU test suite, as CI runs it: set-up, build (the CUDA sources too when nvcc is
# present, compile only), unit and golden tests, bounded fuzzing of the model-file parsers.
# GPU tests live in scripts/gpu-check.sh and run on a machine with a GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
build_dir=$(cd "${OPTIMATE_BUILD_DIR:-build}" && pwd)

echo "== unit and golden tests"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" -L cpu

echo "== live server suite (official openai client, hostile input, Prometheus, load)"
OPTIMATE_BIN="$build_dir/optimate" tests/python/run.sh

echo "== Python package (the in-process engine, on the embedded model)"
OPTIMATE_BUILD_DIR="$build_dir" tests/python_api/run.sh

echo "== fuzzing the GGUF and safetensors parsers (bounded)"
scripts/fuzz.sh "${OPTIMATE_FUZZ_SECONDS:-30}"
