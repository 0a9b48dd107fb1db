#!/usr/bin/env bash
# The independent check of `optimate bench --url`: one workload through our HTTP client and
# through AIPerf (NVIDIA's OpenAI-compatible load generator, from PyPI) against the same
# `optimate serve`, with the headline metrics side by side (scripts/bench_crosscheck.py).
# Not part of CI: it takes minutes and its figures move with the machine's load.
#   OPTIMATE_BIN    the binary (default: build/optimate)
#   OPTIMATE_MODEL  the model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf)
#   ARRIVAL (constant: RATE req/s, default 0.5; or closed: CONCURRENCY in flight, default 8),
#   NUM_REQUESTS (64), PROMPT_TOKENS (128), OUTPUT_TOKENS (64),
#   ROUNDS (1; round 2 runs the tools in the other order), OUT (bench-results/crosscheck),
#   PIN (1: the server on core 0 with one thread, the load tools on the other cores)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
aiperf_version=0.13.0
venv=$root/.venv-crosscheck
stamp=$venv/.aiperf-$aiperf_version
if [[ ! -f "$stamp" ]]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "aiperf==$aiperf_version"
  touch "$stamp"
fi
exec python3 scripts/bench_crosscheck.py --aiperf "$venv/bin/aiperf" "$@"
