#!/usr/bin/env bash
# The Python package's tests (the in-process engine) against the extension built in the CMake
# build tree, on the embedded model. Uses the virtual environment scripts/setup.sh prepared.
#   OPTIMATE_BUILD_DIR  the CMake build (default: build); its python/ folder holds the package
#   OPTIMATE_VENV       the virtual environment (default: .venv in the repository root)
# Extra arguments go to pytest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build_dir=${OPTIMATE_BUILD_DIR:-build}
[[ "$build_dir" = /* ]] || build_dir="$root/$build_dir"
venv=${OPTIMATE_VENV:-$root/.venv}
if [[ ! -d "$build_dir/python/optimate" ]]; then
  echo "python_package: $build_dir/python/optimate is missing: build the optimate_python target" >&2
  exit 1
fi
export PYTHONPATH="$build_dir/python${PYTHONPATH:+:$PYTHONPATH}"
export OPTIMATE_BIN=${OPTIMATE_BIN:-$build_dir/optimate}
cd "$here"
exec "$venv/bin/python" -m pytest -p no:cacheprovider -q "$@"
