#!/usr/bin/env bash
# The vLLM plugin's tests (optimate.vllm): vLLM's own v1 scheduler driven directly on the CPU,
# with the package's extension from the CMake build tree.
#   OPTIMATE_VLLM_VENV  a virtual environment with vLLM 0.26 (default: .venv-vllm in the
#                       repository root; scripts/setup-vllm.sh makes it)
#   OPTIMATE_BUILD_DIR  the CMake build (default: build); its python/ folder holds the package,
#                       its optimate the server test_request_values.py starts
# Extra arguments go to pytest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build_dir=${OPTIMATE_BUILD_DIR:-build}
[[ "$build_dir" = /* ]] || build_dir="$root/$build_dir"
venv=${OPTIMATE_VLLM_VENV:-$root/.venv-vllm}
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import vllm" 2>/dev/null; then
  echo "vllm_plugin: $venv has no vLLM: run scripts/setup-vllm.sh" >&2
  exit 1
fi
export PYTHONPATH="$build_dir/python${PYTHONPATH:+:$PYTHONPATH}"
export OPTIMATE_BIN="${OPTIMATE_BIN:-$build_dir/optimate}"
# No hub access: the tests' model is a config.json they write; vLLM must not look for more.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-WARNING}
cd "$here"
exec "$venv/bin/python" -m pytest -p no:cacheprovider -q "$@"
