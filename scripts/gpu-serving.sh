#!/usr/bin/env bash
# The mixed, prefill-heavy load served over HTTP on a GPU: configs/workloads/overload-h200.toml
# (prompts ~700 tokens, outputs ~180, bursts above capacity, 128 sequences) against a fresh
# `optimate serve --config configs/overload-h200.toml` per variant, each measured by
# `optimate bench --url`, whose report carries the server's own profile of the run (host phases,
# device busy time, and device time per stage on every 64th step: --stage-profile-interval 64). Writes OUT/VARIANT/ (reports) and prints one table.
# bf16 and fp8 runs are held to benchmarks/gates/serving-h200.toml (a run worse than the recorded
# throughput or P99 TTFT beyond its tolerance fails); OUT/VARIANT-gate.toml records each run.
# Usage: gpu-serving.sh OPTIMATE_BIN OUT_DIR [VARIANT ...]   variants: bf16 (default), fp8, and
# bf16-sync / fp8-sync: the same with --no-async-scheduling (each step waits for the last)
set -uo pipefail
bin=${1:?usage: gpu-serving.sh OPTIMATE_BIN OUT_DIR [bf16|fp8|bf16-sync|fp8-sync ...]}
out=${2:?usage: gpu-serving.sh OPTIMATE_BIN OUT_DIR [bf16|fp8|bf16-sync|fp8-sync ...]}
shift 2
variants=("$@")
[[ ${#variants[@]} -gt 0 ]] || variants=(bf16)
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/wait-healthy.sh"
port=${OPTIMATE_SERVING_PORT:-8125}
url=http://127.0.0.1:$port
mkdir -p "$out"
status=0
for v in "${variants[@]}"; do
  case $v in
    bf16) flags=() ;;
    fp8) flags=(--quantization fp8) ;;
    bf16-sync) flags=(--no-async-scheduling) ;;
    fp8-sync) flags=(--quantization fp8 --no-async-scheduling) ;;
    *) echo "unknown variant $v (bf16, fp8, bf16-sync, fp8-sync)"; exit 2 ;;
  esac
  "$bin" serve --config "$root/configs/overload-h200.toml" --device cuda \
    --tokenizer "$root/models/llama3-tokenizer" --served-model-name llama3-dummy --port "$port" \
    --stage-profile-interval 64 "${flags[@]}" >"$out/$v.serve.log" 2>&1 &
  pid=$!
  if ! wait_healthy "$url" $pid; then
    echo "$v: server did not start"; tail -5 "$out/$v.serve.log"; status=1
    kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
    continue
  fi
  # The regression gate (benchmarks/gates/serving-h200.toml) fails the run below its recorded
  # throughput or above its recorded P99 TTFT; --record-gate keeps this run's figures.
  gate=()
  grep -q "^\[runs\.$v\]" "$root/benchmarks/gates/serving-h200.toml" &&
    gate=(--gate "$root/benchmarks/gates/serving-h200.toml")
  (cd "$root" && "$bin" bench --workload configs/workloads/overload-h200.toml --url "$url" --label "$v" \
     --served-model-name llama3-dummy --out "$out/$v" "${gate[@]}" --record-gate "$out/$v-gate.toml") \
     >"$out/$v.bench.log" 2>&1 || { status=1; grep -A12 "Regression gate" "$out/$v.bench.log"; }
  kill -TERM $pid
  wait $pid || status=1
  rm -f "$out/$v"/*.svg
done
python3 - "$out" "${variants[@]}" <<'PY' || status=1
import json, sys
out, variants = sys.argv[1], sys.argv[2:]
print("| server | output tok/s | mean TPOT (ms) | mean TTFT (ms) | failed | device busy % | engine steps |")
print("|---|---:|---:|---:|---:|---:|---:|")
for v in variants:
    try:
        run = json.load(open(f"{out}/{v}/report.json"))["runs"][0]
    except OSError:
        continue
    s, p = run["summary"], run.get("step_profile", {})
    engine_s = sum(p.get("phase_seconds", {}).values()) or float("nan")
    busy = 100 * sum(p.get("device_seconds", {}).values()) / engine_s
    steps = sum(p.get("steps", {}).values())
    print(f"| {v} | {s['output_throughput']:.0f} | {s['tpot_ms']['mean']:.2f} | {s['ttft_ms']['mean']:.0f} "
          f"| {s['failed']} | {busy:.1f} | {steps} |")
PY
for v in "${variants[@]}"; do
  [[ -f "$out/$v/report.md" ]] && sed -n '/### Where the engine/,/^Command:/p' "$out/$v/report.md"
done
exit $status
