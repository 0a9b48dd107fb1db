#!/usr/bin/env bash
# KV quantization on a GPU, each stage printing a short table:
#   perplexity  optimate perplexity of the real SmolLM2 weights over both texts of
#               tests/data/text, decode-like (prefill chunks of 16 tokens, so every block past
#               the windows is read quantized), for the static fp8, int8 and int4 caches and
#               kv_quant at int8 and int4 (always on, first 16 and newest 64 tokens kept), against
#               the bf16 cache: the quality gates (int4 <= 3%, int8 <= 0.5%, fp8 <= 1%), to set
#               beside the CPU figures in docs/benchmarks.md
#   decode      the decode-heavy KV-bound load (configs/workloads/kv-bound-decode-h200.toml) in
#               process: bf16, static int8, kv_quant int8 and int4
#   throughput  the prefill-heavy KV-bound load (configs/workloads/kv-bound-h200.toml)
#   burst       the mixed-priority burst load (configs/workloads/kv-burst-h200.toml): bf16, kv_quant
#               int8 without and with protect_priority, and each class's P99 TTFT and E2E
# Usage: gpu-kv-quant.sh OPTIMATE_BIN SMOLLM2_GGUF OUT_DIR [stages] (default "perplexity").
# KV_BENCH_FLAGS: more `optimate bench` flags for the loads, e.g. "--set gpu_memory_utilization=0.44"
# (an 80 GB card given the 35 GiB the configurations' 0.25 is of an H200).
set -uo pipefail
bin=${1:?usage: gpu-kv-quant.sh OPTIMATE_BIN SMOLLM2_GGUF OUT_DIR [stages]}
gguf=${2:?}
out=${3:?}
stages=${4:-perplexity}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
status=0
keep="activation_threshold=0,priority_aware=false,keep_first_tokens=16,keep_recent_tokens=64"
if [[ " $stages " == *" perplexity "* ]]; then
  printf '| text | KV cache | perplexity change | mean KL | top-1 agreement |\n|---|---|---:|---:|---:|\n'
  for text in python-execution-model kjv-genesis; do
    for case in "fp8:--kv-cache-dtype fp8" "int8:--kv-cache-dtype int8" "int4:--kv-cache-dtype int4" \
                "kv_quant-int8:--optimizer kv_quant:bits=8,$keep" "kv_quant-int4:--optimizer kv_quant:bits=4,$keep"; do
      name=${case%%:*}
      # shellcheck disable=SC2086
      "$bin" perplexity --device cuda --model "$gguf" --file "$root/tests/data/text/$text.txt" --ctx 512 --chunk 16 \
        --gpu-memory-utilization 0.3 --json ${case#*:} >"$out/ppl-$text-$name.json" 2>"$out/ppl-$text-$name.log" || status=1
      python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"| {sys.argv[2]} | {sys.argv[3]} | {100*j['perplexity_change']:+.2f}% | {j['mean_kl']:.5f} | {100*j['top1_agreement']:.1f}% |\")" \
        "$out/ppl-$text-$name.json" "$text" "$name" || status=1
    done
  done
fi
if [[ " $stages " == *" decode "* ]]; then
  (cd "$root" && "$bin" bench --workload configs/workloads/kv-bound-decode-h200.toml --backend cuda \
     --compare configs/kv/bf16.toml,configs/kv/int8.toml,configs/kv/dynamic-int8.toml,configs/kv/dynamic-int4.toml \
     --out "$out/kv-bound-decode" ${KV_BENCH_FLAGS:-}) >"$out/kv-bound-decode.log" 2>&1 || status=1
  grep -E "^\|" "$out/kv-bound-decode.log" | head -8
fi
if [[ " $stages " == *" throughput "* ]]; then
  (cd "$root" && "$bin" bench --workload configs/workloads/kv-bound-h200.toml --backend cuda \
     --compare configs/kv/bf16.toml,configs/kv/fp8.toml,configs/kv/int8.toml,configs/kv/int4.toml,configs/kv/dynamic-int8.toml \
     --out "$out/kv-bound" ${KV_BENCH_FLAGS:-}) >"$out/kv-bound.log" 2>&1 || status=1
  grep -E "^\|" "$out/kv-bound.log" | head -8
fi
if [[ " $stages " == *" burst "* ]]; then
  (cd "$root" && "$bin" bench --workload configs/workloads/kv-burst-h200.toml --backend cuda \
     --compare configs/kv/bf16.toml,configs/kv/burst-dynamic-int8-unprotected.toml,configs/kv/burst-dynamic-int8.toml \
     --out "$out/kv-burst" ${KV_BENCH_FLAGS:-}) >"$out/kv-burst.log" 2>&1 || status=1
  "$root/scripts/class-latency.py" "$out/kv-burst/report.json" || status=1
fi
exit $status
