#!/usr/bin/env bash
# KV quantization on a GPU: perplexity of the real SmolLM2 weights at every KV precision
# against bf16 (optimate perplexity), then the KV-bound throughput comparison on the
# Llama-3-8B shape (configs/workloads/kv-bound-h200.toml: static bf16, fp8, int8, int4 and the
# kv_quant optimizer). Usage: gpu-kv-quant.sh OPTIMATE_BIN SMOLLM2_GGUF OUT_DIR [stages]
# stages (default "perplexity throughput").
set -uo pipefail
bin=${1:?usage: gpu-kv-quant.sh OPTIMATE_BIN SMOLLM2_GGUF OUT_DIR}
gguf=${2:?}
out=${3:?}
stages=${4:-perplexity throughput}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
status=0
if [[ " $stages " == *" perplexity "* ]]; then
  for d in fp8 int8 int4; do
    "$bin" perplexity --device cuda --model "$gguf" --file "$root/tests/data/text/python-execution-model.txt" \
      --ctx 512 --kv-cache-dtype "$d" --gpu-memory-utilization 0.3 --json >"$out/perplexity-$d.json" \
      2>"$out/perplexity-$d.log" || status=1
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"{sys.argv[2]}: perplexity {j['perplexity']:.4f} vs {j['reference_perplexity']:.4f} ({100*j['perplexity_change']:+.2f}%), KL {j['mean_kl']:.5f}, top-1 {100*j['top1_agreement']:.2f}%\")" \
      "$out/perplexity-$d.json" "$d" || status=1
  done
fi
if [[ " $stages " == *" throughput "* ]]; then
  (cd "$root" && "$bin" bench --workload configs/workloads/kv-bound-h200.toml --backend cuda \
     --compare configs/kv/bf16.toml,configs/kv/fp8.toml,configs/kv/int8.toml,configs/kv/int4.toml,configs/kv/dynamic-int8.toml \
     --out "$out/kv-bound") >"$out/kv-bound.log" 2>&1 || status=1
  grep -E "^\|" "$out/kv-bound.log" | head -8
fi
exit $status
