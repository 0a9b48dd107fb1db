#!/usr/bin/env bash
# Runs one cpu_decode_bench case of two builds in turn (A B A B ...), so both see the same
# machine load, and prints each run's tokens/s and the median of the per-pair ratios A/B.
#   benchmarks/cpu_ab.sh A_BENCH A_FILTER B_BENCH B_FILTER [ROUNDS] [MIN_TIME]
# e.g. this build's 8-bit path against another build's default, 2 threads, 128-token prompt:
#   benchmarks/cpu_ab.sh build/benchmarks/cpu_decode_bench 'BM_Prefill128/2/2/' \
#       ../base/build/benchmarks/cpu_decode_bench 'BM_Prefill128/2/1/' 5
# A bench named llama-bench (llama.cpp's) takes its own arguments instead of a filter, e.g.
# '-m models/SmolLM2-135M-Instruct.Q4_1.gguf -p 128 -n 0 -t 2' for the same prompt case.
set -euo pipefail
a_bench=$1 a_filter=$2 b_bench=$3 b_filter=$4 rounds=${5:-5} min_time=${6:-2}
rate() {  # bench filter -> tokens/s of the one matching case
  if [[ $(basename "$1") == llama-bench ]]; then
    # shellcheck disable=SC2086  # llama-bench's arguments, split on purpose
    "$1" $2 -o json 2>/dev/null |
      python3 -c 'import json,sys; b=json.load(sys.stdin); assert len(b)==1, "arguments must give one case"; print(b[0]["avg_ts"])'
    return
  fi
  "$1" --benchmark_filter="$2" --benchmark_min_time="$min_time" --benchmark_format=json 2>/dev/null |
    python3 -c 'import json,sys; b=json.load(sys.stdin)["benchmarks"]; assert len(b)==1, "filter must match one case"; print(b[0]["tokens/s"])'
}
a=() b=()
for ((i = 0; i < rounds; i++)); do
  a+=("$(rate "$a_bench" "$a_filter")")
  b+=("$(rate "$b_bench" "$b_filter")")
  printf "round %d: A %.1f tok/s, B %.1f tok/s (load %s)\n" $((i + 1)) "${a[-1]}" "${b[-1]}" "$(cut -d" " -f1 /proc/loadavg)"
done
python3 - "${a[*]}" "${b[*]}" <<'PY'
import statistics, sys
a = [float(v) for v in sys.argv[1].split()]
b = [float(v) for v in sys.argv[2].split()]
r = [x / y for x, y in zip(a, b)]
print(f"median A {statistics.median(a):.1f} tok/s, B {statistics.median(b):.1f} tok/s, "
      f"A/B median {statistics.median(r):.2f} (min {min(r):.2f}, max {max(r):.2f})")
PY
