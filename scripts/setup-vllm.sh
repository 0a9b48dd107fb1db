#!/usr/bin/env bash
# A virtual environment with vLLM for the vLLM plugin's tests (tests/vllm_plugin): vLLM 0.26.0
# from PyPI with its dependencies (torch with its CUDA libraries: ~8 GB on disk, ~6.5 minutes
# on a 2-core machine). Idempotent: an environment that already imports that vLLM is kept.
# The install peaks at ~12 GB (the downloaded wheels beside the unpacked environment, both on the
# environment's file system); with less free space than that it installs nothing, says so and
# exits 75, which scripts/test.sh reports as the plugin suite skipped for want of disk.
#   OPTIMATE_VLLM_VENV  where (default: .venv-vllm in the repository root)
#   OPTIMATE_VLLM_NEED_GB  the free space to ask for, in GiB (default 13)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${OPTIMATE_VLLM_VENV:-$root/.venv-vllm}
version=0.26.0
if [[ -x "$venv/bin/python" ]] &&
   [[ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null)" == "$version" ]]; then
  exit 0
fi
need_gb=${OPTIMATE_VLLM_NEED_GB:-13}
parent=$(dirname "$venv")
while [[ ! -d "$parent" ]]; do parent=$(dirname "$parent"); done
free_kib=$(df -Pk "$parent" 2>/dev/null | awk 'NR == 2 { print $4 }' || true)
if [[ "$free_kib" =~ ^[0-9]+$ ]] && (( free_kib / 1024 / 1024 < need_gb )); then
  echo "setup-vllm: $(( free_kib / 1024 / 1024 )) GiB free on $parent's file system, vLLM's install needs $need_gb GiB: not installed" >&2
  exit 75
fi
# pip's downloads and unpacked wheels go beside the environment, on the file system just checked.
tmp=$(mktemp -d "$parent/.setup-vllm-tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The same Python as the package's extension (scripts/setup.sh builds it for python3).
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
start=$(date +%s)
TMPDIR=$tmp "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir "vllm==$version" "pytest>=8"
echo "setup-vllm: vLLM $version in $venv ($(( $(date +%s) - start )) s)"
