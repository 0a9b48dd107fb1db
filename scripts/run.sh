#!/usr/bin/env bash
# The main job: set-up, build, then `optimate serve` on the embedded default model
# (SmolLM2-135M-Instruct), an OpenAI-compatible server on http://127.0.0.1:8000.
# Extra arguments go to `optimate serve` (e.g. --port 9000 --api-key KEY).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
exec "${OPTIMATE_BUILD_DIR:-build}/optimate" serve \
  --model models/SmolLM2-135M-Instruct.Q4_1.gguf --served-model-name smollm2 "$@"
