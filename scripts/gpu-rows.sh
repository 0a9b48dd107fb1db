#!/usr/bin/env bash
# Every row of the serving comparison with vLLM on one H200 (Llama-3-8B shape, dummy weights),
# in one call of about seven minutes, each figure printed as it comes, then the table:
#   kv-bound decode over HTTP, bf16 and fp8 KV: configs/workloads/kv-bound-decode-h200.toml
#     against `optimate serve --config configs/kv/{bf16,fp8}.toml` (0.25 of the card, 512
#     sequences, 8192-token steps, no prefix caching)
#   KV capacity at 0.25 of the card, bf16 and fp8: the tokens those two servers logged at start
#   prefill-heavy bursts over HTTP: scripts/gpu-serving.sh (configs/workloads/overload-h200.toml)
#   the same requests kept 256 in flight (configs/workloads/prefill-heavy-saturated-h200.toml)
#     against `optimate serve --config configs/overload-h200.toml`: the bursts' arrivals bound
#     any engine there (about 6,190 out tok/s), this row's throughput is the engine's own
#   offline, 1,000 requests, bf16 and FP8 weights: optimate bench --backend cuda on
#     configs/workloads/offline-1000-h200.toml with configs/h200-throughput{,-fp8}.toml
#   batch-1 decode, bf16 and FP8 weights: cuda_decode_bench --only batch1 (overlapped steps)
# Each HTTP row reports output tok/s with mean and P99 TPOT and P99 ITL.
#   kv-bound decode with the kv_quant optimizer at int4 (configs/kv/dynamic-int4.toml), row
#     kv-int4dyn, and vLLM served the same load with the same limits, bf16 and fp8 KV, rows
#     vllm-kv-bf16 and vllm-kv-fp8 (VLLM_PYTHON runs it, VLLM_MODEL its model folder; not default)
# Usage: gpu-rows.sh BUILD_DIR OUT_DIR   (BUILD_DIR holds optimate and cuda_decode_bench)
# OPTIMATE_ROWS picks rows (default: kv-bf16 kv-fp8 bursts saturated offline batch1).
# OPTIMATE_ROWS_GPU_UTIL sets the KV-bound rows' gpu_memory_utilization on both engines (default
# the configurations' 0.25 of an H200, 35 GiB; 0.44 gives an 80 GB card the same memory).
set -uo pipefail
build=${1:?usage: gpu-rows.sh BUILD_DIR OUT_DIR}
out=${2:?usage: gpu-rows.sh BUILD_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=$build/optimate
port=${OPTIMATE_ROWS_PORT:-8126}
url=http://127.0.0.1:$port
rows=" ${OPTIMATE_ROWS:-kv-bf16 kv-fp8 bursts saturated offline batch1} "
status=0
table=$out/rows.md
: >"$table"

# summary.py REPORT_DIR: "out tok/s, mean TPOT, P99 TPOT, P99 ITL" of the report's first run.
summary() {
  python3 - "$1/report.json" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))["runs"][0]["summary"]
except (OSError, KeyError, IndexError):
    print("no report"); sys.exit(0)
print(f"{s['output_throughput']:,.0f} out tok/s, mean TPOT {s['tpot_ms']['mean']:.1f} ms, "
      f"P99 TPOT {s['tpot_ms']['p99']:.1f} ms, P99 ITL {s['itl_ms']['p99']:.1f} ms, failed {s['failed']}")
PY
}

row() { echo "| $1 | $2 |" | tee -a "$table"; }

# serve_and_bench NAME CONFIG WORKLOAD: one fresh server, one `optimate bench --url` run.
serve_and_bench() {
  local name=$1 config=$2 workload=$3
  local util=()
  [[ -n ${OPTIMATE_ROWS_GPU_UTIL:-} && $config == configs/kv/* ]] && util=(--gpu-memory-utilization "$OPTIMATE_ROWS_GPU_UTIL")
  "$bin" serve --config "$root/$config" --device cuda --tokenizer "$root/models/llama3-tokenizer" \
    --served-model-name llama3-dummy --port "$port" "${util[@]}" >"$out/$name.serve.log" 2>&1 &
  bench_server "$name" "$!" "$workload"
}

# vllm_serve_and_bench NAME KV_DTYPE WORKLOAD: vLLM served with the KV-bound rows' limits.
vllm_serve_and_bench() {
  local name=$1 dtype=$2 workload=$3
  VLLM_USE_FLASHINFER_SAMPLER=0 "${VLLM_PYTHON:-python3}" -m vllm.entrypoints.openai.api_server \
    --model "${VLLM_MODEL:-/tmp/vllm-model}" --load-format dummy --served-model-name llama3-dummy --port "$port" \
    --gpu-memory-utilization "${OPTIMATE_ROWS_GPU_UTIL:-0.25}" --max-num-seqs 512 --max-num-batched-tokens 8192 \
    --no-enable-prefix-caching --kv-cache-dtype "$dtype" >"$out/$name.serve.log" 2>&1 &
  bench_server "$name" "$!" "$workload"
}

# bench_server NAME PID WORKLOAD: wait for the server PID, run the load, stop it, add its rows.
bench_server() {
  local name=$1 pid=$2 workload=$3 up=0
  for _ in $(seq 1 400); do
    curl -sf "$url/health" >/dev/null && { up=1; break; }
    kill -0 $pid 2>/dev/null || break
    sleep 1
  done
  if [[ $up -eq 0 ]]; then
    row "$name" "server did not start: $(tail -1 "$out/$name.serve.log")"
    kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
    status=1
    return
  fi
  curl -s "$url/metrics" | grep '^vllm:cache_config_info' >"$out/$name.cache_config_info.txt"
  (cd "$root" && "$bin" bench --workload "$workload" --url "$url" --label "$name" \
     --served-model-name llama3-dummy --out "$out/$name") >"$out/$name.bench.log" 2>&1 || status=1
  kill -TERM $pid
  wait $pid || status=1
  # the next server sizes its cache from free memory: wait for this one's (and its children's)
  for _ in $(seq 1 60); do
    (( $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1) < 2048 )) && break
    sleep 1
  done
  rm -f "$out/$name"/*.svg
  row "$name" "$(summary "$out/$name")"
  row "$name KV capacity" "$(grep -hoE 'GPU KV cache size: [0-9,]+ tokens|Maximum concurrency for [0-9,]+ tokens per request: [0-9.]+x' \
      "$out/$name.serve.log" | paste -sd ';' -)"
  grep -hE 'CUDA memory plan|decode graphs' "$out/$name.serve.log" | tail -2
}

echo "| row | figures |" | tee -a "$table"
echo "|---|---|" | tee -a "$table"
[[ $rows == *" kv-bf16 "* ]] && serve_and_bench kv-bound-bf16 configs/kv/bf16.toml configs/workloads/kv-bound-decode-h200.toml
[[ $rows == *" kv-fp8 "* ]] && serve_and_bench kv-bound-fp8 configs/kv/fp8.toml configs/workloads/kv-bound-decode-h200.toml
[[ $rows == *" kv-int4dyn "* ]] &&
  serve_and_bench kv-bound-kv-quant-int4 configs/kv/dynamic-int4.toml configs/workloads/kv-bound-decode-h200.toml
[[ $rows == *" vllm-kv-bf16 "* ]] && vllm_serve_and_bench vllm-kv-bound-bf16 auto configs/workloads/kv-bound-decode-h200.toml
[[ $rows == *" vllm-kv-fp8 "* ]] && vllm_serve_and_bench vllm-kv-bound-fp8 fp8 configs/workloads/kv-bound-decode-h200.toml
if [[ $rows == *" bursts "* ]]; then
  OPTIMATE_SERVING_PORT=$port "$root/scripts/gpu-serving.sh" "$bin" "$out/bursts" bf16 >"$out/bursts.log" 2>&1 || status=1
  row "prefill-heavy bursts, bf16" "$(summary "$out/bursts/bf16")"
fi
[[ $rows == *" saturated "* ]] &&
  serve_and_bench prefill-saturated configs/overload-h200.toml configs/workloads/prefill-heavy-saturated-h200.toml
if [[ $rows == *" offline "* ]]; then
  (cd "$root" && "$bin" bench --workload configs/workloads/offline-1000-h200.toml \
     --compare h200-throughput,h200-throughput-fp8 --backend cuda --out "$out/offline") >"$out/offline.log" 2>&1 || status=1
  python3 - "$out/offline/report.json" <<'PY' | while read -r line; do row "offline 1,000, ${line%%:*}" "${line#*: }"; done
import json, sys
try:
    runs = json.load(open(sys.argv[1]))["runs"]
except (OSError, KeyError):
    print("all: no report"); sys.exit(0)
for r in runs:
    s = r["summary"]
    print(f"{r.get('label', '?')}: {s['output_throughput']:,.0f} out tok/s, mean TPOT {s['tpot_ms']['mean']:.1f} ms")
PY
fi
if [[ $rows == *" batch1 "* ]]; then
  for q in none fp8; do
    "$build/cuda_decode_bench" --only batch1 --quantization "$q" --out "$out/batch1_$q.json" >"$out/batch1_$q.log" 2>&1 || status=1
    row "batch-1 decode, weights $q" "$(python3 -c "
import json, sys
j = json.load(open('$out/batch1_$q.json'))
print(f\"{j['batch1_graph_overlap']['tokens_per_s']:.1f} tok/s overlapped, {j['batch1_graph']['tokens_per_s']:.1f} one step at a time\")
" 2>/dev/null || echo "failed: $(tail -1 "$out/batch1_$q.log")")"
  done
fi
echo
cat "$table"
exit $status
