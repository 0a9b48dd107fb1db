#!/usr/bin/env bash
# The seed's comparison table (section 4.3) on a GPU, over HTTP: baseline, A (predictive
# batching, max_wait_ms 50), B (priority, 3 levels), C (both), with the seed's columns
# (throughput, mean and P99 TTFT, GPU utilization) and the memory and cost beside them.
#
# One `optimate serve` (Llama-3-8B shape, dummy weights, 64 sequences and 2048-token steps as
# configs/baseline.toml) takes each scenario's optimizers through PUT /v1/optimizers/NAME, with
# the options of configs/a-predictive.toml and configs/b-priority.toml, and its prefix cache
# is reset between runs (every run sends the same prompts). Each run is
# configs/workloads/mixed-h200.toml (bursts of 60 req/s for 5 s over 20 req/s, lognormal
# lengths, 10/30/60% high/medium/low priorities) cut to one burst cycle (OPTIMATE_ABC_REQUESTS,
# default 600), measured by `optimate bench --url`, which reads the server's GPU utilization
# (NVML) and memory from its /metrics during the run.
# Writes OUT/{baseline,A,B,C}/ (reports) and OUT/table.md.
# Usage: gpu-abc.sh OPTIMATE_BIN OUT_DIR   (OPTIMATE_ABC_PRICE: $/hour for the cost column, default 3.5;
#   OPTIMATE_ABC_MODEL_ARGS replaces the model flags, e.g. "--model models/m.gguf --device cpu"
#   for a smoke run without a GPU; OPTIMATE_ABC_SETS adds bench flags, e.g. "--set workload.output.max=8")
set -uo pipefail
bin=${1:?usage: gpu-abc.sh OPTIMATE_BIN OUT_DIR}
out=${2:?usage: gpu-abc.sh OPTIMATE_BIN OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/wait-healthy.sh"
port=${OPTIMATE_ABC_PORT:-8126}
url=http://127.0.0.1:$port
requests=${OPTIMATE_ABC_REQUESTS:-600}
price=${OPTIMATE_ABC_PRICE:-3.5}
mkdir -p "$out"
status=0

model_args=${OPTIMATE_ABC_MODEL_ARGS:-"--model $root/configs/models/llama-3-8b --load-format dummy --device cuda --tokenizer $root/models/llama3-tokenizer"}
# shellcheck disable=SC2086
"$bin" serve $model_args --served-model-name abc --port "$port" \
  --max-num-seqs 64 --max-num-batched-tokens 2048 >"$out/serve.log" 2>&1 &
pid=$!
if ! wait_healthy "$url" $pid; then
  echo "server did not start"; tail -5 "$out/serve.log"
  kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
  exit 1
fi

put() { # optimizer, JSON body
  curl -sf -X PUT "$url/v1/optimizers/$1" -H 'Content-Type: application/json' -d "$2" >/dev/null ||
    { echo "PUT /v1/optimizers/$1 failed"; status=1; }
}
predictive='{"enabled": true, "options": {"max_wait_ms": 50}}'
priority='{"enabled": true, "options": {"levels": 3, "lowest_priority": 1, "aging_ms": 5000,
  "max_wait_ms_low": 20000, "max_wait_ms_medium": 10000, "max_wait_ms_high": 2000, "min_run_ms": 500}}'
off='{"enabled": false}'
for scenario in baseline A B C; do
  case $scenario in
    baseline) put predictive "$off"; put priority "$off" ;;
    A) put predictive "$predictive"; put priority "$off" ;;
    B) put predictive "$off"; put priority "$priority" ;;
    C) put predictive "$predictive"; put priority "$priority" ;;
  esac
  curl -sf -X POST "$url/reset_prefix_cache" >/dev/null || { echo "reset_prefix_cache failed"; status=1; }
  curl -sf "$url/v1/optimizers" >"$out/$scenario.optimizers.json"
  (cd "$root" && "$bin" bench --workload configs/workloads/mixed-h200.toml --url "$url" --label "$scenario" \
     --served-model-name abc --set workload.num_requests="$requests" --price-per-hour "$price" \
     --out "$out/$scenario" ${OPTIMATE_ABC_SETS:-}) >"$out/$scenario.bench.log" 2>&1 || status=1
  rm -f "$out/$scenario"/*.svg
done
kill -TERM $pid
wait $pid || status=1

python3 - "$out" "$price" <<'PY' | tee "$out/table.md" || status=1
import json, sys
out, price = sys.argv[1], sys.argv[2]
what = {"baseline": "FCFS, launch at once", "A": "predictive batching (max_wait_ms = 50)",
        "B": "priority scheduling (3 levels)", "C": "priority (3 levels) + predictive (max_wait_ms = 50)"}
rows = {}
for s in what:
    try:
        rows[s] = json.load(open(f"{out}/{s}/report.json"))["runs"][0]["summary"]
    except OSError:
        pass
def num(v, digits=0):
    return "n/a" if v is None or v != v else f"{v:.{digits}f}"
def pct(v, b):
    ok = s != "baseline" and v is not None and b and v == v and b == b
    return f" ({100 * (v - b) / b:+.0f}%)" if ok else ""
def high_p99(r):
    c = [c for c in r["classes"] if c["name"] == "high"]
    return c[0]["ttft_ms"]["p99"] if c else float("nan")
print(f"| Scenario | Configuration | Throughput (out tok/s) | Mean TTFT (ms) | P99 TTFT (ms) | high P99 TTFT (ms) "
      f"| GPU util % | GPU mem (GiB) | $/M out tok at ${price}/h | failed |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
base = rows.get("baseline")
for s, r in rows.items():
    b = base or r
    print(f"| {s} | {what[s]} | {num(r['output_throughput'])}{pct(r['output_throughput'], b['output_throughput'])} "
          f"| {num(r['ttft_ms']['mean'])}{pct(r['ttft_ms']['mean'], b['ttft_ms']['mean'])} "
          f"| {num(r['ttft_ms']['p99'])}{pct(r['ttft_ms']['p99'], b['ttft_ms']['p99'])} "
          f"| {num(high_p99(r))}{pct(high_p99(r), high_p99(b))} "
          f"| {num(r['gpu']['util_mean_pct'], 1)} ({r['gpu']['util_source'] or r['gpu']['unavailable']}) "
          f"| {num(r['gpu']['memory_peak_gib'], 1)} | {num(r['usd_per_million_output_tokens'], 3)} | {r['failed']} |")
PY
exit $status
