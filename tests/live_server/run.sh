#!/usr/bin/env bash
# The live-server suite: the official openai client, hostile inputs, Prometheus, load and
# shutdown against `optimate serve` on the embedded model. Creates (or reuses) a virtual
# environment with tests/live_server/requirements.txt, then runs pytest in tests/live_server; extra arguments go to pytest.
#   OPTIMATE_BIN    the binary (default: build/optimate)
#   OPTIMATE_MODEL  the model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf)
#   OPTIMATE_VENV   the virtual environment (default: .venv in the repository root)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${OPTIMATE_VENV:-$root/.venv}
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
stamp="$venv/.optimate-python-tests"
if [[ ! -f "$stamp" || "$here/requirements.txt" -nt "$stamp" ]]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  touch "$stamp"
fi
cd "$here"
exec "$venv/bin/python" -m pytest -p no:cacheprovider -q "$@"
