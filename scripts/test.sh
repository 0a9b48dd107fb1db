#!/usr/bin/env bash
# The whole CPU test suite, as CI runs it: set-up, build (the CUDA sources too when nvcc is
# present, compile only), unit and golden tests, bounded fuzzing of the model-file parsers, the
# request parser and the structured-output grammar path.
# GPU tests live in scripts/gpu-check.sh and run on a machine with a GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
build_dir=$(cd "${OPTIMATE_BUILD_DIR:-build}" && pwd)

echo "== unit and golden tests"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" -L cpu

echo "== live server suite (official openai client, hostile input, Prometheus, load)"
OPTIMATE_BIN="$build_dir/optimate" tests/live_server/run.sh

echo "== Python package (the in-process engine, on the embedded model)"
OPTIMATE_BUILD_DIR="$build_dir" tests/python_package/run.sh

echo "== fuzzing the model-file parsers, request parsing and the grammar path (bounded)"
scripts/fuzz.sh "${OPTIMATE_FUZZ_SECONDS:-30}"

# vLLM's scheduler with Optimate's optimizers: vLLM comes in its own environment (~8 GB, ~6.5
# minutes to install), made when OPTIMATE_INSTALL_VLLM=1 (CI sets it) and used when present.
# Without room for it (setup-vllm.sh exits 75) the suite is skipped and says why.
vllm_setup=0
if [[ "${OPTIMATE_INSTALL_VLLM:-0}" = 1 ]]; then
  scripts/setup-vllm.sh || vllm_setup=$?
  (( vllm_setup == 0 || vllm_setup == 75 )) || exit "$vllm_setup"
fi
if (( vllm_setup == 75 )); then
  echo "== vLLM plugin: SKIPPED, too little free disk for vLLM's environment (setup-vllm.sh above)"
elif [[ -x "${OPTIMATE_VLLM_VENV:-$root/.venv-vllm}/bin/python" ]]; then
  echo "== vLLM plugin (vLLM's v1 scheduler with Optimate's optimizers)"
  OPTIMATE_BUILD_DIR="$build_dir" tests/vllm_plugin/run.sh
else
  echo "== vLLM plugin: skipped (no .venv-vllm; scripts/setup-vllm.sh makes it)"
fi
