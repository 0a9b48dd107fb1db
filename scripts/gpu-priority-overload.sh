#!/usr/bin/env bash
# Priority under sustained overload, through `optimate serve` on a GPU: the same workload
# (configs/workloads/overload-h200.toml, vLLM's lower-first priorities) against a fresh server
# with FCFS, then one with the priority optimizer at its defaults, each measured by
# `optimate bench --url`. Writes OUT/fcfs/ and OUT/priority/ (reports) and prints one table.
# Usage: gpu-priority-overload.sh OPTIMATE_BIN OUT_DIR [extra bench flags, e.g. --set ...]
set -uo pipefail
bin=${1:?usage: gpu-priority-overload.sh OPTIMATE_BIN OUT_DIR}
out=${2:?usage: gpu-priority-overload.sh OPTIMATE_BIN OUT_DIR}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
port=${OPTIMATE_OVERLOAD_PORT:-8124}
url=http://127.0.0.1:$port
mkdir -p "$out"
status=0
run_one() { # label, extra serve flags...
  local label=$1; shift
  "$bin" serve --config "$root/configs/overload-h200.toml" --device cuda \
    --tokenizer "$root/models/llama3-tokenizer" --served-model-name llama3-dummy --port "$port" \
    "$@" >"$out/$label.serve.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 180); do
    curl -sf "$url/health" >/dev/null && break
    kill -0 $pid 2>/dev/null || { echo "$label: server exited during start-up"; status=1; return; }
    sleep 1
  done
  (cd "$root" && "$bin" bench --workload configs/workloads/overload-h200.toml --url "$url" \
     --label "$label" --served-model-name llama3-dummy --out "$out/$label" "${extra[@]}") \
     >"$out/$label.bench.log" 2>&1 || status=1
  kill -TERM $pid
  wait $pid || status=1
}
extra=("$@")
run_one fcfs
run_one priority --optimizer priority
python3 - "$out" <<'PY' || status=1
import json, sys
out = sys.argv[1]
rows = {}
for label in ("fcfs", "priority"):
    run = json.load(open(f"{out}/{label}/report.json"))["runs"][0]
    s, recs = run["summary"], run["records"]
    def p99(cls):
        v = sorted(r["first_token_s"] - r["arrival_s"] for r in recs if r["success"] and r["priority_class"] == cls)
        return 1000 * v[min(len(v) - 1, int(0.99 * len(v)))]
    rows[label] = (s["output_throughput"], p99("high"), p99("low"), s["failed"])
print("| server | output tok/s | high P99 TTFT (ms) | low P99 TTFT (ms) | failed |")
print("|---|---:|---:|---:|---:|")
for label, (tput, hi, lo, failed) in rows.items():
    print(f"| {label} | {tput:.0f} | {hi:.0f} | {lo:.0f} | {failed} |")
f, p = rows["fcfs"], rows["priority"]
print(f"high P99 TTFT: priority/FCFS = {p[1] / f[1]:.3f} (target <= 0.05); throughput ratio {p[0] / f[0]:.3f} (target >= 0.97)")
PY
exit $status
