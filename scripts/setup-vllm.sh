#!/usr/bin/env bash
# A virtual environment with vLLM for the vLLM plugin's tests (tests/vllm_plugin): vLLM 0.26.0
# from PyPI with its dependencies (torch with its CUDA libraries: ~8 GB on disk, ~6.5 minutes
# on a 2-core machine). Idempotent: an environment that already imports that vLLM is kept.
#   OPTIMATE_VLLM_VENV  where (default: .venv-vllm in the repository root)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${OPTIMATE_VLLM_VENV:-$root/.venv-vllm}
version=0.26.0
if [[ -x "$venv/bin/python" ]] &&
   [[ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null)" == "$version" ]]; then
  exit 0
fi
# The same Python as the package's extension (scripts/setup.sh builds it for python3).
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
start=$(date +%s)
"$venv/bin/python" -m pip install -q --disable-pip-version-check "vllm==$version" "pytest>=8"
echo "setup-vllm: vLLM $version in $venv ($(( $(date +%s) - start )) s)"
