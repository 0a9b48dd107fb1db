#!/usr/bin/env bash
# vLLM with Optimate's optimizers against vLLM alone, on one GPU: three `vllm serve` of
# Llama-3-8B (dummy weights) side by side, each with 4 GiB of KV cache and max_num_seqs 64 —
# FCFS (vLLM's default), `--scheduling-policy priority`, and `--scheduler-cls
# optimate.vllm.Scheduler` with the priority optimizer — then configs/workloads/
# vllm-two-class-burst.toml against each in turn (`optimate bench --url`), and one table: the
# high class's P99 TTFT and the output throughput of each. Beside it in OUT_DIR: each server's
# vLLM preemptions (vllm-preemptions.txt) and engine steps with tokens per step (vllm-steps.txt).
#
# Usage: scripts/gpu-vllm-plugin.sh OPTIMATE_BIN OUT_DIR
#   OPTIMATE_BIN  the `optimate` binary (the benchmark client; any build)
#   VLLM_PYTHON   the Python that runs vLLM (default: python3; `. /tmp/vllm_env.sh` first where vLLM
#                 was installed from its wheels: /work/shared/tools/vllm-on-device)
#   VLLM_MODEL    the model folder (default: /tmp/vllm-model, the wheels' Llama-3-8B config)
#   BUILD_ONLY=1  stop after building (a first device call; the run then fits in one more)
#   SERVERS       which of fcfs, vllm-priority, optimate to start and load, in that order
#                 (default all three; the table's ratios are against the first)
#   PRIORITY_OPTIONS  the priority optimizer's options as JSON (default {}: its defaults),
#                 e.g. '{"preempt_after_ms": 200}'
#   BENCH_FLAGS   more `optimate bench` flags, e.g. "--set workload.num_requests=1500"
#   VLLM_GPU_UTIL each server's --gpu-memory-utilization (default 0.3; three servers share the card,
#                 so 0.27 on an 80 GB card: each holds ~15 GiB of weights, 4 GiB of KV and its graphs)
# The package's extension is built here for that Python (build-vllm-python/), from the carried
# .venv's nanobind: the Python needs its development headers.
set -uo pipefail
bin=${1:?usage: gpu-vllm-plugin.sh OPTIMATE_BIN OUT_DIR}
out=${2:?usage: gpu-vllm-plugin.sh OPTIMATE_BIN OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
py=${VLLM_PYTHON:-python3}
model=${VLLM_MODEL:-/tmp/vllm-model}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1

# 1. optimate._core for vLLM's Python (CPU engine only: the plugin needs the policies, not kernels).
build=$root/build-vllm-python
nanobind_dir=$(ls -d "$root"/.venv/lib/python3*/site-packages/nanobind/cmake 2>/dev/null | head -1)
if [[ ! -f "$build/python/optimate/_core.abi3.so" && -z "$(ls "$build"/python/optimate/_core*.so 2>/dev/null)" ]]; then
  [[ -n "$nanobind_dir" ]] || { echo "no nanobind in $root/.venv (run scripts/setup.sh where PyPI is reachable and carry .venv)"; exit 1; }
  echo "== building optimate._core for $($py --version)"
  if ! { cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPTIMATE_CUDA=OFF -DOPTIMATE_TESTS=OFF \
           -DOPTIMATE_BENCHMARKS=OFF -DOPTIMATE_PYTHON=ON -DPython_EXECUTABLE="$(command -v "$py")" \
           -Dnanobind_DIR="$nanobind_dir" &&
         cmake --build "$build" --target optimate_python -j "$(nproc)"; } >"$out/build.log" 2>&1; then
    echo "build FAILED (see $out/build.log)"; grep -E "error|Error" "$out/build.log" | head -20; exit 1
  fi
fi
# vLLM finds plugins by their entry points: the package's metadata, as `pip install` would write it.
dist=$build/python/optimate-0.1.0.dist-info
mkdir -p "$dist"
printf 'Metadata-Version: 2.1\nName: optimate\nVersion: 0.1.0\n' >"$dist/METADATA"
printf '[vllm.general_plugins]\noptimate = optimate.vllm.plugin:register\n\n[vllm.endpoint_plugins]\noptimate = optimate.vllm.plugin:OptimizersEndpoint\n' \
  >"$dist/entry_points.txt"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c "import optimate.vllm.scheduler" || { echo "optimate.vllm does not import in $py"; exit 1; }
[[ "${BUILD_ONLY:-0}" == 1 ]] && { echo "built $build"; exit 0; }

# 2. Three servers at once (their KV caches are fixed, so they size nothing from free memory).
common=(--model "$model" --load-format dummy --served-model-name llama3-dummy --max-num-seqs 64
        --max-model-len 4096 --kv-cache-memory-bytes 4294967296 --gpu-memory-utilization "${VLLM_GPU_UTIL:-0.3}")
declare -A port=([fcfs]=8201 [vllm-priority]=8202 [optimate]=8203)
declare -A extra=([fcfs]="" [vllm-priority]="--scheduling-policy priority"
                  [optimate]="--scheduler-cls optimate.vllm.Scheduler")
servers=(${SERVERS:-fcfs vllm-priority optimate})
optimate_config="{\"optimate\": {\"optimizers\": {\"priority\": ${PRIORITY_OPTIONS:-{\}}}}}"
declare -A label=([fcfs]=vllm-fcfs [vllm-priority]=vllm-priority [optimate]=vllm+optimate)
pids=()
for s in "${servers[@]}"; do
  args=("${common[@]}" --port "${port[$s]}")
  # shellcheck disable=SC2206
  args+=(${extra[$s]})
  [[ $s == optimate ]] && args+=(--additional-config "$optimate_config")
  VLLM_PLUGINS=optimate "$py" -m vllm.entrypoints.openai.api_server "${args[@]}" >"$out/$s.serve.log" 2>&1 &
  pids+=($!)
done
stop() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap stop EXIT
for s in "${servers[@]}"; do
  up=0
  for _ in $(seq 1 400); do
    curl -sf "http://127.0.0.1:${port[$s]}/health" >/dev/null && { up=1; break; }
    sleep 1
  done
  [[ $up -eq 1 ]] || { echo "$s did not start"; tail -20 "$out/$s.serve.log"; exit 1; }
done
echo "== servers up"
has_optimate=0
[[ " ${servers[*]} " == *" optimate "* ]] && has_optimate=1
(( has_optimate )) && curl -s "http://127.0.0.1:${port[optimate]}/v1/optimizers" >"$out/optimizers-before.json"

# 3. The load against each in turn.
status=0
targets=()
for s in "${servers[@]}"; do targets+=(--url "http://127.0.0.1:${port[$s]}" --label "${label[$s]}"); done
# shellcheck disable=SC2086
(cd "$root" && "$bin" bench --workload configs/workloads/vllm-two-class-burst.toml "${targets[@]}" \
   --served-model-name llama3-dummy --out "$out/bench" ${BENCH_FLAGS:-}) >"$out/bench.log" 2>&1 || status=1
if (( has_optimate )); then
  curl -s "http://127.0.0.1:${port[optimate]}/v1/optimizers" >"$out/optimizers-after.json"
  curl -s "http://127.0.0.1:${port[optimate]}/metrics" | grep '^optimate:' >"$out/optimate-metrics.txt"
fi
# vLLM's own preemption count on each server (recompute preemptions, whoever chose the victim).
for s in "${servers[@]}"; do
  echo "$s $(curl -s "http://127.0.0.1:${port[$s]}/metrics" | grep '^vllm:num_preemptions_total' | awk '{n += $NF} END {print n + 0}')"
done >"$out/vllm-preemptions.txt"
# Each server's engine steps and tokens per step (vLLM's iteration_tokens histogram): with its
# run's duration, the mean step, which a client's TPOT (it counts waits after preemptions) is not.
for s in "${servers[@]}"; do
  curl -s "http://127.0.0.1:${port[$s]}/metrics" | awk -v s="$s" '
    /^vllm:iteration_tokens_total_count/ {n += $NF} /^vllm:iteration_tokens_total_sum/ {t += $NF}
    END {printf "%s steps %d tokens_per_step %.1f\n", s, n, n ? t / n : 0}'
done >"$out/vllm-steps.txt"

# 4. The table.
"$py" - "$out/bench/report.json" <<'PY' || status=1
import json, sys
report = json.load(open(sys.argv[1]))
rows = []
for run in report["runs"]:
    s = run["summary"]
    high = next((c for c in s.get("classes", []) if c["name"] == "high"), None)
    low = next((c for c in s.get("classes", []) if c["name"] == "low"), None)
    rows.append((run["label"], high["ttft_ms"]["p99"] if high else float("nan"),
                 low["ttft_ms"]["p99"] if low else float("nan"), s["output_throughput"], s["failed"]))
base = rows[0][3]
print(f"| server | high P99 TTFT (ms) | low P99 TTFT (ms) | output tok/s | vs {rows[0][0]} | failed |")
print("|---|---:|---:|---:|---:|---:|")
for label, high, low, tput, failed in rows:
    print(f"| {label} | {high:.0f} | {low:.0f} | {tput:.0f} | {100 * (tput / base - 1):+.1f}% | {failed} |")
PY
(( has_optimate )) &&
  echo "optimizer fallbacks: $(grep -c fallbacks_total "$out/optimate-metrics.txt") series; see $out/optimizers-after.json"
exit $status
