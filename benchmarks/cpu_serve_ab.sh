#!/usr/bin/env bash
# Serving on the CPU, two servers side by side: starts `optimate serve` of build A and build B on
# the embedded SmolLM2 (same flags), runs `optimate bench --url` over both (A's row first, then
# B's; ROUNDS times, alternating which goes first), then prints each server's peak resident
# memory (VmHWM: the process's high-water mark, loading included) and current RSS.
#   benchmarks/cpu_serve_ab.sh A_OPTIMATE B_OPTIMATE [ROUNDS] [extra serve flags...]
# e.g. benchmarks/cpu_serve_ab.sh build/optimate ../base/build/optimate 3
# B may instead be any OpenAI-compatible server's whole command line, with {port} where its
# port goes (the extra flags are A's only), e.g. llama.cpp's on the same file:
#   benchmarks/cpu_serve_ab.sh build/optimate \
#     'llama-server -m models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2 -np 64 -c 8192 --port {port}' 1 --num-threads 2
# A's binary runs the bench either way.
set -euo pipefail
a_bin=$1 b_bin=$2 rounds=${3:-3}
shift $(($# < 3 ? $# : 3))
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
workload=${WORKLOAD:-configs/workloads/offline-64-cpu.toml}
out=${OUT:-bench-results/cpu-serve-ab}
mkdir -p "$out"
start() {  # binary-or-command port [flags...] -> pid of the server
  if [[ "$1" == *"{port}"* ]]; then
    exec_cmd=${1//\{port\}/$2}
    # shellcheck disable=SC2086  # a command line, split on purpose
    exec $exec_cmd >"$out/server-$2.log" 2>&1 &
  else
    "$1" serve --model "$model" --served-model-name smollm2 --port "$2" "${@:3}" >"$out/server-$2.log" 2>&1 &
  fi
  echo $!
}
a_pid=$(start "$a_bin" 8811 "$@")
if [[ "$b_bin" == *"{port}"* ]]; then b_pid=$(start "$b_bin" 8812); else b_pid=$(start "$b_bin" 8812 "$@"); fi
trap 'kill $a_pid $b_pid 2>/dev/null || true' EXIT
for port in 8811 8812; do
  for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null && break; sleep 0.5; done
done
mem() { awk '/VmHWM|VmRSS/ {printf "%s %.0f MB  ", $1, $2 / 1024}' "/proc/$1/status"; }
echo "after start: A $(mem $a_pid)| B $(mem $b_pid)"
for ((i = 0; i < rounds; i++)); do
  if ((i % 2 == 0)); then urls=http://127.0.0.1:8811,http://127.0.0.1:8812 labels=A,B
  else urls=http://127.0.0.1:8812,http://127.0.0.1:8811 labels=B,A; fi
  "$a_bin" bench --workload "$workload" --url "$urls" --label "$labels" --out "$out/round$i" 2>&1 |
    grep -iE "^\| *(A|B|metric|output|request)" || true
  echo "round $((i + 1)) done (load $(cut -d' ' -f1 /proc/loadavg)): A $(mem $a_pid)| B $(mem $b_pid)"
done
