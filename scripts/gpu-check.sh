#!/usr/bin/env bash
# The GPU suite and the GPU benchmarks, for a machine with an NVIDIA GPU (CI has none and runs
# scripts/test.sh). Builds the project (or, without the CPU stack's libraries, the GPU suite
# alone), runs every GPU test, the Llama-3-8B-shaped benchmarks, `optimate serve` on the GPU
# and the 1000-request offline throughput run, and writes logs
# and results under the folder given:
#   configure.log build.log   the build (with ptxas register/spill reports)
#   test_cuda.log test_cuda.json   the kernel and runner tests (GoogleTest JSON)
#   hf_reference.log          the transformers reference for the end-to-end test
#   bench.json bench.log      the benchmark's figures and progress
#   attention.json attention.log  the attention kernels alone (the decode kernels, small
#                             batches against the head clusters, prefill, long-context decode
#                             over bf16, fp8, int8 and int4 KV blocks)
#   kv_tests.log kv_tests.json kv_attention.json kv_attention.log kv/  the `kv` stage: the KV
#                             precision tests, the long-context decode cases alone and the
#                             perplexity gates per precision (scripts/gpu-kv-quant.sh; with
#                             OPTIMATE_KV_STAGES="perplexity decode", the decode-heavy load too)
#   sampling.json sampling.log  fused vs unfused GPU sampling per step
#   peer.json peer.log        transformers on the same shapes (when OPTIMATE_HF_PEER names hf_peer.py)
#   test_cuda_engine.log/json the engine on the CUDA runner against the CPU engine
#   serve.log                 optimate serve --device cuda smoke test (scripts/gpu-serve-smoke.sh)
#   offline/ offline.log offline-gate.toml  optimate bench, configs/workloads/offline-1000-h200.toml,
#                             held to benchmarks/gates/offline-1000-h200.toml (the regression gate)
#   swap_tests.log/json swap/ swap.log  the `swap` stage: SwapOnCuda tests, then the
#                             long-context load recompute vs swap vs auto (optimate bench)
#   overload/ overload.log    priority under sustained overload through optimate serve
#                             (scripts/gpu-priority-overload.sh)
#   serving/ serving.log      the `serving` stage: the mixed prefill-heavy load served over HTTP
#                             (scripts/gpu-serving.sh; OPTIMATE_SERVING_VARIANTS, default
#                             "bf16 fp8"), with the server's own profile of each run
#   h200-llama3-8b.json calibrate.log  the sim backend's profile, measured (bench --calibrate)
#   python.log                the Python package on the GPU (tests/python_package/gpu_check.sh)
#   adaptive/ adaptive.log    the adaptive controller against the default configuration on
#                             configs/workloads/phases-h200.toml (optimate bench, ~8 minutes)
#   tp_tests.log tp_tests.json tp_bench.json tp_bench.log tp-offline-N/ tp-offline-N.log  the `tp`
#                             stage: tensor parallelism's GPU tests (TP=2 and 3 with the ranks on
#                             GPU 0, TP=1 through NCCL), and with more than one GPU visible the
#                             NCCL all-reduce, decode at TP=1, 2, 4, 8 (as many as fit) and the
#                             1000-request offline run at TP=1 and 2 (optimate bench)
#   fp8_tests.log fp8_tests.json fp8_bench_none.json fp8_bench_fp8.json fp8_offline/ fp8_offline.log
#                             the `fp8` stage: the FP8-weight tests (and the GEMV/GEMM/runner
#                             tests around them), cuda_decode_bench --quick without and with
#                             --quantization fp8, and the 1000-request offline run of both
#                             (OPTIMATE_FP8_PARTS picks of: tests bench offline)
#   elementwise_tests.log/json elementwise.json elementwise.txt  the `elementwise` stage
#                             (scripts/gpu-elementwise.sh): the GEMM path's elementwise kernels,
#                             their tests and the current kernels against the baseline
#   kernels_tests.log/json    the `kernels` stage: kernel variants and their failover (KernelsOnCuda)
#   gemv_tests.log gemv_tests.json gemv.json gemv.log  the `gemv` stage: the decode GEMV tests
#                             (every kernel, bf16 and FP8) and cuda_decode_bench --only gemv
#   portable_tests.log/json portable_engine.log/json portable_bench_{hopper,portable}.json/log
#   portable_offline_{hopper,portable}/ portable_offline_*.log
#                             the `portable` stage: the kernel and engine tests with the portable
#                             kernels forced (OPTIMATE_CUDA_KERNELS=portable: what Ampere and Ada
#                             run), batch-1 decode (cuda_decode_bench --quick 1) and the
#                             1000-request offline run through both paths, side by side
#                             (OPTIMATE_PORTABLE_PARTS picks of: tests engine bench offline;
#                             OPTIMATE_PORTABLE_TEST_FILTER narrows the tests)
#   moe_tests.log moe_tests.json moe_bench_*.json moe_bench_*.log moe_offline/ moe_offline.log
#                             the `moe` stage: the Qwen3 and mixture-of-experts tests (kernels
#                             against their CPU twins, the runner against transformers), then
#                             cuda_moe_bench on the Qwen3-30B-A3B shape (bf16 and FP8) and the
#                             Qwen3-8B shape (batch 1 against the bytes a token reads, batches 64
#                             and 256, a 2048-token prefill), and the 1000-request offline run of
#                             both shapes (OPTIMATE_MOE_PARTS picks of: tests bench offline)
#   abc/ abc.log              the `abc` stage: the seed's table (baseline, predictive, priority,
#                             both) over HTTP, one server retuned between runs (scripts/gpu-abc.sh)
#   rows/ rows.log            the `rows` stage (scripts/gpu-rows.sh): every row of the serving
#                             comparison with vLLM in one call, about seven minutes (kv-bound decode
#                             over HTTP with bf16 and fp8 KV, KV capacity at 0.25 of the card,
#                             prefill-heavy bursts over HTTP and kept saturated, offline 1,000 with bf16 and FP8
#                             weights, batch-1 decode with both), printed as a table
#   flashinfer_build.log flashinfer.json flashinfer.log  the `flashinfer` stage: FlashInfer's
#                             attention against the project's kernels on the same paged cache
#                             (cuda_flashinfer_bench: its FA2 prefill and decode, and on Hopper its
#                             FA3 prefill; needs third_party/flashinfer from scripts/setup.sh,
#                             about 48 MB, carried to a machine without network), with the time
#                             its kernels took to compile
#   summary.txt               pass/fail per stage and the headline numbers
# Usage: scripts/gpu-check.sh OUT_DIR [extra cuda_decode_bench flags]
# OPTIMATE_HF_E2E_LAYERS (default 2): layers of the end-to-end config; 0 skips it.
# OPTIMATE_GPU_STAGES (default all but kv, swap, adaptive, tp, fp8, elementwise, gemv, serving, kernels,
#   portable, moe, abc, rows and flashinfer): the stages to run after the build, of
#   tests engine bench attention sampling peer serve offline overload calibrate python kv swap adaptive tp fp8
#   elementwise gemv serving kernels portable moe abc rows flashinfer
# kernels: the kernel variants' tests on the GPU (KernelsOnCuda), which `engine` also runs.
# OPTIMATE_CUDA_ARCHS (default: this GPU's compute capability, 90a on Hopper): the build's GPU
#   architectures (CMakeLists.txt); the full list builds what a release serves.
# (kv: the quantized-KV tests and the attention benchmark's KV section, which `tests` and
# `attention` also run, for a quick check of that work alone: OPTIMATE_GPU_STAGES=kv;
# swap: the swap and host-tier engine tests, which `engine` also runs, and the long-context
# preemption load in its three preemption modes; OPTIMATE_SWAP_SETS adds bench flags).
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUT_DIR [bench flags]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${OPTIMATE_GPU_BUILD_DIR:-$root/build-gpu}
export PATH=/usr/local/cuda/bin:$PATH
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
# A wanted stage that needs the full build (the engine, `optimate`) when only the GPU suite built.
skipped() { note "== $1 SKIPPED: the full build failed (configure.log), so there is no engine to run"; }
want() { [[ " ${OPTIMATE_GPU_STAGES:-tests engine bench attention sampling peer serve offline overload calibrate python} " == *" $1 "* ]]; }
test_status=0 engine_status=0 bench_status=0 attention_status=0 sampling_status=0 peer_status=0 serve_status=0 offline_status=0
calibrate_status=0 overload_status=0 adaptive_status=0 serving_status=0 abc_status=0 rows_status=0 flashinfer_status=0

nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || note "nvidia-smi failed"

note "== configure"
# The whole project (the engine and `optimate` too); a machine without the CPU stack's
# libraries falls back to the GPU suite alone (core, model, the CUDA backend).
full=1
# The build is for the GPU it runs on (a Hopper build's sm_90 code also holds the portable
# kernels, which OPTIMATE_CUDA_KERNELS=portable selects), unless OPTIMATE_CUDA_ARCHS says.
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
[[ "$cc" == 90 ]] && cc=90a
archs=${OPTIMATE_CUDA_ARCHS:-${cc:-80;86;89;90a}}
note "CUDA architectures: $archs"
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPTIMATE_CUDA=ON \
    -DOPTIMATE_GPU_SUITE_ONLY=OFF -DOPTIMATE_TESTS=ON -DCMAKE_CUDA_FLAGS=-Xptxas=-v "-DOPTIMATE_CUDA_ARCHS=$archs" \
    >"$out/configure.log" 2>&1; then
  full=0
  note "full configure failed (see configure.log); building the GPU suite alone"
  rm -rf "$build"
  if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPTIMATE_CUDA=ON \
      -DOPTIMATE_GPU_SUITE_ONLY=ON -DOPTIMATE_TESTS=ON -DCMAKE_CUDA_FLAGS=-Xptxas=-v "-DOPTIMATE_CUDA_ARCHS=$archs" \
      >>"$out/configure.log" 2>&1; then
    note "configure FAILED (see configure.log)"
    tail -20 "$out/configure.log"
    exit 1
  fi
fi
note "== build"
targets=(test_cuda cuda_decode_bench cuda_attention_bench cuda_sampling_bench cuda_tp_bench cuda_moe_bench)
[[ $full -eq 1 ]] && targets+=(test_cuda_engine optimate)
if ! cmake --build "$build" --target "${targets[@]}" -j "$(nproc)" >"$out/build.log" 2>&1; then
  note "build FAILED (see build.log)"
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi

if want tests; then
note "== transformers reference"
e2e_layers=${OPTIMATE_HF_E2E_LAYERS:-2}
if [[ $e2e_layers -gt 0 ]]; then
  e2e_dir=/tmp/optimate_hf_e2e_$e2e_layers
  if PYTHONUNBUFFERED=1 python3 "$root/tests/scripts/hf_e2e_reference.py" --out "$e2e_dir" \
      --layers "$e2e_layers" >"$out/hf_reference.log" 2>&1; then
    export OPTIMATE_HF_E2E_DIR=$e2e_dir
  else
    note "transformers reference FAILED (see hf_reference.log); the end-to-end test skips"
    tail -5 "$out/hf_reference.log"
  fi
fi

note "== GPU tests"
"$build/tests/test_cuda" --gtest_output="json:$out/test_cuda.json" >"$out/test_cuda.log" 2>&1
test_status=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$out/test_cuda.log" | tee -a "$summary"
grep -E "Failure|expected|elements outside" "$out/test_cuda.log" | head -40
grep -E "^HF e2e|GPU draws differ|CPU backend not built" "$out/test_cuda.log" | tee -a "$summary"
fi
if want engine && [[ $full -eq 0 ]]; then
  skipped engine
  engine_status=1
elif want engine; then
  "$build/tests/test_cuda_engine" --gtest_output="json:$out/test_cuda_engine.json" >"$out/test_cuda_engine.log" 2>&1
  engine_status=$?
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" "$out/test_cuda_engine.log" | tee -a "$summary"
  grep -E "Failure|Expected|Which is" "$out/test_cuda_engine.log" | head -20
fi

if want bench; then
note "== benchmark"
"$build/cuda_decode_bench" --out "$out/bench.json" "$@" >"$out/bench.log" 2>&1
bench_status=$?
cat "$out/bench.log" | tail -20
python3 - "$out/bench.json" <<'PY' | tee -a "$summary" || true
import json, sys
j = json.load(open(sys.argv[1]))
print(f"copy bandwidth {j['copy_bandwidth_gb_per_s']:.0f} GB/s")
for k in ("batch1_graph", "batch1_graph_no_pdl", "batch1_graph_unfused_pdl",
          "batch1_graph_unfused", "batch1_eager"):
    if k in j:
        b = j[k]
        print(f"{k}: {b['tokens_per_s']:.1f} tok/s, {b['ms_per_token']:.2f} ms/token, "
              f"{100 * b['fraction_of_copy_bandwidth']:.1f}% of copy bandwidth")
for b in j.get("batched_decode", []):
    print(f"batch {b['batch']}: {b['output_tokens_per_s']:.0f} output tok/s ({b['ms_per_step']:.2f} ms/step)")
p = j.get("prefill")
if p:
    print(f"prefill {p['tokens']} tokens: {p['ms']:.1f} ms ({p['linear_tflop_per_s']:.0f} TFLOP/s in linear layers)")
for mode, g in j.get("gemv_model_chain", {}).items():
    print(f"weight streaming alone ({mode}): {g['ms']:.3f} ms, {g['gb_per_s']:.0f} GB/s")
for g in j.get("gemv_splits", []):
    print(f"gemv {g['gemm']:8s} split {g['split']}{'*' if g['auto'] else ' '} "
          f"{'pdl' if g['programmatic'] else '   '} {g['us']:8.1f} us {g['gb_per_s']:7.0f} GB/s")
for e in j.get("small_batch_fused", []):
    print(f"batch {e['batch']} {'fused  ' if e['fused'] else 'unfused'}: {e['ms_per_step']:.2f} ms/step")
for key, b in j.get("breakdown", {}).items():
    parts = []
    for st in b["stages"]:
        x = f"{st['stage']} {st['ms_per_step']:.3f}"
        if "tflop_per_s" in st:
            x += f" ({st['tflop_per_s']:.0f} TF/s, {st['gb_per_s']:.0f} GB/s, {100 * st['fraction_of_roofline']:.0f}% of roofline)"
        parts.append(x)
    print(f"breakdown {key}: {b['ms_per_step']:.2f} ms/step eager; " + "; ".join(parts))
for g in j.get("gemms", []):
    print(f"gemm {g['gemm']:8s} m={g['m']:<4} {g['path']:8s} {g['us']:8.1f} us {g['gb_per_s']:7.0f} GB/s {g['tflop_per_s']:6.1f} TFLOP/s")
PY
fi
if want attention; then
note "== attention kernels"
"$build/cuda_attention_bench" --out "$out/attention.json" >"$out/attention.log" 2>&1
attention_status=$?
tee -a "$summary" <"$out/attention.log"
fi
if want sampling; then
note "== sampling benchmark"
"$build/cuda_sampling_bench" --out "$out/sampling.json" >"$out/sampling.log" 2>&1
sampling_status=$?
grep -E "^batch" "$out/sampling.log" | tee -a "$summary"
# Shares of a decode step need the decode benchmark's step times.
[[ -f "$out/bench.json" ]] && python3 - "$out/bench.json" "$out/sampling.json" <<'PY' | tee -a "$summary" || true
import json, sys
bench, samp = (json.load(open(f)) for f in sys.argv[1:3])
step_ms = {1: bench["batch1_graph"]["ms_per_token"]}
for b in bench.get("batched_decode", []):
    step_ms[b["batch"]] = b["ms_per_step"]
for e in samp["sampling"]:
    ms = step_ms.get(e["batch"])
    if not ms:
        continue
    for name, us in e["fused_us"].items():
        base = e["unfused_us"][name]
        print(f"share of the batch-{e['batch']} decode step ({ms:.2f} ms), {name}: fused "
              f"{100 * us / 1000 / ms:.2f}%, unfused {100 * base / 1000 / ms:.2f}%")
PY

fi
kv_status=0
if want kv; then
  note "== KV cache precisions: tests and long-context decode attention"
  "$build/tests/test_cuda" --gtest_filter='*KvCacheWrite*:*KvRequantize*:*Mixed*Attention*:*QuantizedCache*:*DynamicKvCache*:*KvCacheOptions*:*AllLogits*:*DecodeAttention*:*PrefillAttention*:Gemv.*:CudaRunner.*' \
    --gtest_output="json:$out/kv_tests.json" >"$out/kv_tests.log" 2>&1
  kv_status=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$out/kv_tests.log" | tee -a "$summary"
  grep -E "Failure|expected|elements outside|bytes differ" "$out/kv_tests.log" | head -40
  "$build/cuda_attention_bench" --only kv --out "$out/kv_attention.json" >"$out/kv_attention.log" 2>&1
  [[ $? -eq 0 ]] || kv_status=1
  tee -a "$summary" <"$out/kv_attention.log"
  # The quality gates on the GPU (scripts/gpu-kv-quant.sh; OPTIMATE_KV_STAGES adds "decode").
  if [[ -x "$build/optimate" && -s "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]]; then
    "$root/scripts/gpu-kv-quant.sh" "$build/optimate" "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$out/kv" \
      "${OPTIMATE_KV_STAGES:-perplexity}" 2>&1 | tee -a "$summary"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || kv_status=1
  else
    note "kv: no optimate binary or SmolLM2 GGUF, perplexity skipped"
  fi
fi
elementwise_status=0
if want elementwise; then
  note "== elementwise kernels: tests, current against baseline (kernels alone, prefill breakdowns)"
  "$root/scripts/gpu-elementwise.sh" "$out" | tee -a "$summary"
  elementwise_status=${PIPESTATUS[0]}
fi
gemv_status=0
if want gemv; then
  note "== decode GEMV kernels: tests, then every kernel per shape, row count and weight type"
  "$build/tests/test_cuda" --gtest_filter='Gemv.*:Fp8*:Gemm*:KvCacheWrite.FusedGemv*:CudaRunner.*:*RunnerVsReference*' \
    --gtest_output="json:$out/gemv_tests.json" >"$out/gemv_tests.log" 2>&1
  gemv_status=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$out/gemv_tests.log" | tee -a "$summary"
  grep -E "Failure|expected|elements outside|bytes differ" "$out/gemv_tests.log" | head -40
  "$build/cuda_decode_bench" --only gemv --out "$out/gemv.json" >"$out/gemv.log" 2>&1
  [[ $? -eq 0 ]] || gemv_status=1
  grep -vE '^[][{}" ]|^ ' "$out/gemv.log" | tee -a "$summary"
fi
fp8_status=0
fp8_part() { [[ " ${OPTIMATE_FP8_PARTS:-tests bench offline} " == *" $1 "* ]]; }
if want fp8; then
  note "== FP8 weights (--quantization fp8): tests, decode with and without, offline with and without"
  if fp8_part tests; then
    "$build/tests/test_cuda" --gtest_filter='Fp8*:Gemv*:Gemm*:CudaRunner.*:*RunnerVsReference*' \
      --gtest_output="json:$out/fp8_tests.json" >"$out/fp8_tests.log" 2>&1
    fp8_status=$?
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$out/fp8_tests.log" | tee -a "$summary"
    grep -E "Failure|expected|elements outside|Which is|Expected" "$out/fp8_tests.log" | head -40
    grep -E "^fp8 linear|^FP8 runner" "$out/fp8_tests.log" | tee -a "$summary"
  fi
  if fp8_part bench; then
    for q in none fp8; do
      "$build/cuda_decode_bench" --quick 1 --quantization $q --batches 64,256,1024 \
        --out "$out/fp8_bench_$q.json" >"$out/fp8_bench_$q.log" 2>&1 || { fp8_status=1; tail -5 "$out/fp8_bench_$q.log"; }
    done
    python3 - "$out/fp8_bench_none.json" "$out/fp8_bench_fp8.json" <<'PY' | tee -a "$summary" || true
import json, sys
runs = {}
for path in sys.argv[1:3]:
    try:
        j = json.load(open(path))
        runs[j.get("quantization", "none")] = j
    except Exception as e:
        print(f"fp8 bench: no figures in {path} ({e})")
for q, j in runs.items():
    b = j["batch1_graph"]
    print(f"[{q}] weights {j['weight_bytes'] / 1e9:.2f} GB, load {j.get('load_s', 0):.1f} s; {j['memory_plan']}")
    print(f"[{q}] batch 1: {b['tokens_per_s']:.1f} tok/s, {b['ms_per_token']:.2f} ms/token, "
          f"{100 * b['fraction_of_copy_bandwidth']:.1f}% of copy bandwidth ({j['copy_bandwidth_gb_per_s']:.0f} GB/s)")
    for d in j.get("batched_decode", []):
        print(f"[{q}] batch {d['batch']}: {d['output_tokens_per_s']:.0f} output tok/s ({d['ms_per_step']:.2f} ms/step)")
    p = j.get("prefill")
    if p:
        print(f"[{q}] prefill {p['tokens']} tokens: {p['ms']:.1f} ms")
    for key, br in j.get("breakdown", {}).items():
        parts = "; ".join(f"{st['stage']} {st['ms_per_step']:.3f}" for st in br["stages"])
        print(f"[{q}] breakdown {key}: {br['ms_per_step']:.2f} ms/step eager; {parts}")
if "none" in runs and "fp8" in runs:
    a, b = runs["none"]["batch1_graph"]["tokens_per_s"], runs["fp8"]["batch1_graph"]["tokens_per_s"]
    print(f"fp8 / bf16, batch 1: {b / a:.2f}x")
    for x, y in zip(runs["none"].get("batched_decode", []), runs["fp8"].get("batched_decode", [])):
        print(f"fp8 / bf16, batch {x['batch']}: {y['output_tokens_per_s'] / x['output_tokens_per_s']:.2f}x")
for g in runs.get("fp8", {}).get("fp8_gemms", []):
    print(f"fp8 gemm {g['gemm']:8s} m={g['m']:<5} {g['fp8_path']:17s} fp8 {g['fp8_us']:8.1f} us "
          f"({g['fp8_gb_per_s']:5.0f} GB/s, {g['fp8_tflop_per_s']:6.1f} TF/s)  bf16 {g['bf16_us']:8.1f} us "
          f"({g['bf16_gb_per_s']:5.0f} GB/s, {g['bf16_tflop_per_s']:6.1f} TF/s)  {g['bf16_us'] / g['fp8_us']:.2f}x"
          + (f"; cuBLASLt FP8 {g['fp8_cublaslt_us']:.1f} us" if g.get('fp8_cublaslt_us') else ""))
PY
  fi
  if fp8_part offline && [[ $full -eq 0 ]]; then
    skipped "fp8 offline"
    fp8_status=1
  elif fp8_part offline; then
    (cd "$root" && "$build/optimate" bench --workload configs/workloads/offline-1000-h200.toml \
       --compare h200-throughput,h200-throughput-fp8 --backend cuda --out "$out/fp8_offline") \
       >"$out/fp8_offline.log" 2>&1 || fp8_status=1
    grep -E "^\||KV cache of" "$out/fp8_offline.log" | head -12 | tee -a "$summary"
    tail -3 "$out/fp8_offline.log"
  fi
  note "fp8 exit $fp8_status"
fi
if want peer && [[ -n "${OPTIMATE_HF_PEER:-}" && -f "$out/bench.json" ]]; then
  note "== transformers peer"
  PYTHONUNBUFFERED=1 python3 "$OPTIMATE_HF_PEER" --modes bs1,batch --batch 64 --prompt-len 128 \
    --new-tokens 64 >"$out/peer.json" 2>"$out/peer.log"
  peer_status=$?
  python3 - "$out/bench.json" "$out/peer.json" <<'PY' | tee -a "$summary" || true
import json, sys
ours, peer = (json.load(open(f)) for f in sys.argv[1:3])
print(f"transformers {peer['transformers']}: batch 1 {peer['bs1_tok_s']:.1f} tok/s, batch 64 "
      f"{peer['batch64_out_tok_s']:.0f} out tok/s")
b1 = ours["batch1_graph"]["tokens_per_s"]
print(f"ratio to transformers, batch 1: {b1 / peer['bs1_tok_s']:.1f}x")
for b in ours.get("batched_decode", []):
    if b["batch"] == 64:
        print(f"ratio to transformers, batch 64 decode: {b['output_tokens_per_s'] / peer['batch64_out_tok_s']:.1f}x")
PY
fi
if want serve && [[ $full -eq 0 ]]; then
  skipped serve
  serve_status=1
elif want serve; then
  note "== optimate serve on the GPU (Llama-3-8B shape, dummy weights)"
  "$root/scripts/gpu-serve-smoke.sh" "$build/optimate" >"$out/serve.log" 2>&1
  serve_status=$?
  tail -3 "$out/serve.log" | tee -a "$summary"
fi
if want offline && [[ $full -eq 0 ]]; then
  skipped offline
  offline_status=1
elif want offline; then
  note "== offline throughput: 1000 requests (optimate bench)"
  # Held to the recorded figure (benchmarks/gates/offline-1000-h200.toml) unless sets change the run.
  gate=()
  [[ -z "${OPTIMATE_OFFLINE_SETS:-}" ]] && gate=(--gate benchmarks/gates/offline-1000-h200.toml)
  (cd "$root" && "$build/optimate" bench --workload configs/workloads/offline-1000-h200.toml \
     --compare h200-throughput --backend cuda --out "$out/offline" "${gate[@]}" \
     --record-gate "$out/offline-gate.toml" ${OPTIMATE_OFFLINE_SETS:-}) \
     >"$out/offline.log" 2>&1
  offline_status=$?
  grep -E "^\|" "$out/offline.log" | head -8 | tee -a "$summary"
  grep -E "\| (pass|\*\*FAIL\*\*) \||^Gate" "$out/offline.log" | tee -a "$summary"
  tail -3 "$out/offline.log"
fi
swap_status=0
if want swap && [[ $full -eq 0 ]]; then
  skipped swap
  swap_status=1
elif want swap; then
  note "== swap preemption and the host prefix tier: tests, then the long-context load (optimate bench)"
  "$build/tests/test_cuda_engine" --gtest_filter='SwapOnCuda.*' --gtest_output="json:$out/swap_tests.json" \
    >"$out/swap_tests.log" 2>&1
  swap_status=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$out/swap_tests.log" | tee -a "$summary"
  grep -E "Failure|Expected|Which is" "$out/swap_tests.log" | head -20
  grep -E "host KV tier" "$out/swap_tests.log" | head -2 | tee -a "$summary"
  (cd "$root" && "$build/optimate" bench --workload configs/workloads/long-context-h200.toml \
     --compare long-context-recompute,long-context-swap,long-context-auto --backend cuda --out "$out/swap" \
     ${OPTIMATE_SWAP_SETS:-}) >"$out/swap.log" 2>&1
  [[ $? -eq 0 ]] || swap_status=1
  grep -E "^\||host KV tier" "$out/swap.log" | head -12 | tee -a "$summary"
  tail -3 "$out/swap.log"
fi
kernels_status=0
if want kernels && [[ $full -eq 0 ]]; then
  skipped kernels
  kernels_status=1
elif want kernels; then
  note "== kernel variants: the unfused sampler and separate elementwise kernels, and the failover of a misbehaving one"
  "$build/tests/test_cuda_engine" --gtest_filter='KernelsOnCuda.*' --gtest_output="json:$out/kernels_tests.json" \
    >"$out/kernels_tests.log" 2>&1
  kernels_status=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$out/kernels_tests.log" | tee -a "$summary"
  grep -E "Failure|Expected|Which is|falls back" "$out/kernels_tests.log" | head -20 | tee -a "$summary"
fi
if want overload && [[ $full -eq 0 ]]; then
  skipped overload
  overload_status=1
elif want overload; then
  note "== priority under sustained overload (optimate serve + bench --url, FCFS vs priority)"
  "$root/scripts/gpu-priority-overload.sh" "$build/optimate" "$out/overload" ${OPTIMATE_OVERLOAD_SETS:-} \
    >"$out/overload.log" 2>&1
  overload_status=$?
  tail -6 "$out/overload.log" | tee -a "$summary"
fi
if want serving && [[ $full -eq 0 ]]; then
  skipped serving
  serving_status=1
elif want serving; then
  note "== the mixed prefill-heavy load served over HTTP (optimate serve + bench --url, with the server's profile)"
  "$root/scripts/gpu-serving.sh" "$build/optimate" "$out/serving" ${OPTIMATE_SERVING_VARIANTS:-bf16 fp8} \
    >"$out/serving.log" 2>&1
  serving_status=$?
  grep -E "^\| (server|bf16|fp8) " "$out/serving.log" | tee -a "$summary"
fi
if want abc && [[ $full -eq 0 ]]; then
  skipped abc
  abc_status=1
elif want abc; then
  note "== the seed's table over HTTP: baseline, predictive, priority, both (one server, optimate bench --url)"
  "$root/scripts/gpu-abc.sh" "$build/optimate" "$out/abc" >"$out/abc.log" 2>&1
  abc_status=$?
  grep -E "^\|" "$out/abc.log" | tee -a "$summary"
  note "abc exit $abc_status"
fi
if want flashinfer; then
  note "== FlashInfer's attention against the project's kernels (cuda_flashinfer_bench)"
  start=$(date +%s)
  if cmake --build "$build" --target cuda_flashinfer_bench -j "$(nproc)" >"$out/flashinfer_build.log" 2>&1; then
    note "cuda_flashinfer_bench built in $(( $(date +%s) - start )) s on $(nproc) cores"
    "$build/cuda_flashinfer_bench" --out "$out/flashinfer.json" 2>&1 | tee "$out/flashinfer.log" | tee -a "$summary"
    flashinfer_status=${PIPESTATUS[0]}
  else
    note "cuda_flashinfer_bench did not build (flashinfer_build.log; third_party/flashinfer from scripts/setup.sh?)"
    grep -E "error" "$out/flashinfer_build.log" | head -20
    flashinfer_status=1
  fi
fi
if want rows && [[ $full -eq 0 ]]; then
  skipped rows
  rows_status=1
elif want rows; then
  note "== every row of the comparison with vLLM (scripts/gpu-rows.sh)"
  "$root/scripts/gpu-rows.sh" "$build" "$out/rows" 2>&1 | tee "$out/rows.log"
  rows_status=${PIPESTATUS[0]}
  grep -E "^\| " "$out/rows/rows.md" >>"$summary"
fi
if want calibrate && [[ $full -eq 0 ]]; then
  skipped calibrate
  calibrate_status=1
elif want calibrate; then
  note "== the cost model's H200 profile (optimate bench --calibrate)"
  (cd "$root" && "$build/optimate" bench --calibrate --backend cuda --compare h200-throughput \
     --out "$out/h200-llama3-8b.json") >"$out/calibrate.log" 2>&1
  calibrate_status=$?
  grep -iE "mean absolute|error|written" "$out/calibrate.log" | tail -4 | tee -a "$summary"
fi
note "calibrate exit $calibrate_status"
python_status=0
if want python; then
  note "== the Python package on the GPU"
  "$root/tests/python_package/gpu_check.sh" "${build}-python" >"$out/python.log" 2>&1
  python_status=$?
  tail -3 "$out/python.log" | tee -a "$summary"
  note "python exit $python_status"
fi
if want adaptive && [[ $full -eq 0 ]]; then
  skipped adaptive
  adaptive_status=1
elif want adaptive; then
  note "== adaptive controller against the default configuration (optimate bench, phases-h200)"
  (cd "$root" && "$build/optimate" bench --workload configs/workloads/phases-h200.toml \
     --compare h200-default,h200-adaptive --backend cuda --set decision_log="$out/adaptive-decisions.jsonl" \
     --out "$out/adaptive") >"$out/adaptive.log" 2>&1
  adaptive_status=$?
  grep -E "^\|" "$out/adaptive.log" | head -5 | tee -a "$summary"
  note "adaptive exit $adaptive_status"
fi
tp_status=0
if want tp; then
  note "== tensor parallelism: GPU tests (ranks sharing GPU 0, TP=1 through NCCL)"
  "$build/tests/test_cuda" --gtest_filter='CudaTp*:Splits/CudaTp*:Communicators/CudaTp*:NcclCommunicator.*:Embedding.*' \
    --gtest_output="json:$out/tp_tests.json" >"$out/tp_tests.log" 2>&1
  tp_status=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^CUDA TP" "$out/tp_tests.log" | tee -a "$summary"
  grep -E "Failure|expected|elements outside|differ" "$out/tp_tests.log" | head -40
  if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    gpus=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
  else
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  fi
  # OPTIMATE_TP_BENCH_ONE_GPU=1: the decode benchmark on one GPU too (the one-GPU runner against
  # TP=1 through NCCL: what the split's machinery costs when nothing is split).
  if [[ $gpus -gt 1 || "${OPTIMATE_TP_BENCH_ONE_GPU:-0}" == 1 ]]; then
    note "== tensor parallelism on $gpus GPUs: NCCL all-reduce and decode (Llama-3-8B shape, dummy weights)"
    "$build/cuda_tp_bench" --out "$out/tp_bench.json" >"$out/tp_bench.log" 2>&1
    [[ $? -eq 0 ]] || tp_status=1
    python3 - "$out/tp_bench.json" <<'PY' | tee -a "$summary" || true
import json, sys
j = json.load(open(sys.argv[1]))
for a in j.get("nccl_all_reduce", []):
    print(f"all-reduce {a['bytes']:>10} B over {j['gpus']} GPUs: {a['us']:8.1f} us, bus {a['busbw_gb_per_s']:6.1f} GB/s")
for r in j["runs"]:
    if "error" in r:
        print(f"TP={r['tp']} ({r['communicator']}): {r['error']}")
    for d in r.get("decode", []):
        print(f"TP={r['tp']} ({r['communicator']}) batch {d['batch']}: {d['ms_per_step']:.3f} ms/step, "
              f"{d['output_tokens_per_s']:.0f} tok/s; eager {d['eager_ms_per_step']:.3f} ms of which collectives "
              f"{d['collectives_ms_per_step']:.3f}")
PY
    if [[ $gpus -lt 2 ]]; then
      note "one GPU: the offline runs at tensor-parallel-size 2 wait for a machine with two or more"
    elif [[ $full -eq 1 ]]; then
      for n in 1 2; do
        note "== offline throughput at tensor-parallel-size $n: 1000 requests (optimate bench)"
        (cd "$root" && "$build/optimate" bench --workload configs/workloads/offline-1000-h200.toml \
           --compare h200-throughput --backend cuda --set tensor_parallel_size=$n --out "$out/tp-offline-$n" \
           ${OPTIMATE_OFFLINE_SETS:-}) >"$out/tp-offline-$n.log" 2>&1
        [[ $? -eq 0 ]] || tp_status=1
        grep -E "^\|" "$out/tp-offline-$n.log" | head -8 | tee -a "$summary"
        tail -3 "$out/tp-offline-$n.log"
      done
    else
      skipped "tp offline"
      tp_status=1
    fi
  else
    note "one GPU visible: the multi-GPU decode, all-reduce and offline runs wait for a machine with two or more"
  fi
  note "tp exit $tp_status"
fi
portable_status=0
portable_part() { [[ " ${OPTIMATE_PORTABLE_PARTS:-tests engine bench offline} " == *" $1 "* ]]; }
if want portable; then
  note "== the portable kernels (OPTIMATE_CUDA_KERNELS=portable): tests, then batch-1 decode and offline beside the Hopper path"
  if portable_part tests; then
    OPTIMATE_CUDA_KERNELS=portable "$build/tests/test_cuda" --gtest_filter="${OPTIMATE_PORTABLE_TEST_FILTER:-*}" \
      --gtest_output="json:$out/portable_tests.json" >"$out/portable_tests.log" 2>&1 || portable_status=1
    grep -m1 -o "CUDA GPU .*" "$out/portable_tests.log" | tee -a "$summary"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$out/portable_tests.log" | tee -a "$summary"
    grep -E "Failure|expected|elements outside|differ" "$out/portable_tests.log" | head -40
  fi
  if portable_part engine && [[ $full -eq 1 ]]; then
    OPTIMATE_CUDA_KERNELS=portable "$build/tests/test_cuda_engine" --gtest_filter="${OPTIMATE_PORTABLE_TEST_FILTER:-*}" \
      --gtest_output="json:$out/portable_engine.json" >"$out/portable_engine.log" 2>&1 || portable_status=1
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$out/portable_engine.log" | tee -a "$summary"
    grep -E "Failure|Expected|Which is" "$out/portable_engine.log" | head -20
  fi
  for path in hopper portable; do
    kernels=auto
    [[ $path == portable ]] && kernels=portable
    if portable_part bench; then
      OPTIMATE_CUDA_KERNELS=$kernels "$build/cuda_decode_bench" --quick 1 --batches 64 \
        --out "$out/portable_bench_$path.json" >"$out/portable_bench_$path.log" 2>&1 || { portable_status=1; tail -5 "$out/portable_bench_$path.log"; }
    fi
    if portable_part offline && [[ $full -eq 1 ]]; then
      (cd "$root" && OPTIMATE_CUDA_KERNELS=$kernels "$build/optimate" bench --workload configs/workloads/offline-1000-h200.toml \
         --compare h200-throughput --backend cuda --out "$out/portable_offline_$path") \
         >"$out/portable_offline_$path.log" 2>&1 || { portable_status=1; tail -5 "$out/portable_offline_$path.log"; }
    fi
  done
  python3 - "$out" <<'PY' | tee -a "$summary" || true
import json, os, sys
out = sys.argv[1]
def load(path):
    try:
        return json.load(open(os.path.join(out, path)))
    except Exception:
        return None
rows = []
bench = {p: load(f"portable_bench_{p}.json") for p in ("hopper", "portable")}
if all(bench.values()):
    for p, j in bench.items():
        print(f"[{p}] {j.get('kernel_paths', '')}")
    h, q = (bench[p]["batch1_graph"]["tokens_per_s"] for p in ("hopper", "portable"))
    rows.append(("batch-1 decode, graphs (tok/s)", h, q))
    for a, b in zip(bench["hopper"].get("batched_decode", []), bench["portable"].get("batched_decode", [])):
        rows.append((f"batch {a['batch']} decode (output tok/s)", a["output_tokens_per_s"], b["output_tokens_per_s"]))
    if bench["hopper"].get("prefill") and bench["portable"].get("prefill"):
        rows.append((f"prefill {bench['hopper']['prefill']['tokens']} tokens (ms, lower is better)",
                     bench["hopper"]["prefill"]["ms"], bench["portable"]["prefill"]["ms"]))
offline = {p: load(f"portable_offline_{p}/report.json") for p in ("hopper", "portable")}
if all(offline.values()):
    h, q = (offline[p]["runs"][0]["summary"]["output_throughput"] for p in ("hopper", "portable"))
    rows.append(("offline, 1000 requests (output tok/s)", h, q))
if rows:
    print("| figure | Hopper path | portable path | portable / Hopper |")
    print("|---|---:|---:|---:|")
    for name, h, q in rows:
        print(f"| {name} | {h:.1f} | {q:.1f} | {q / h:.2f} |")
    if all(bench.values()):
        r = bench["portable"]["batch1_graph"]["tokens_per_s"] / bench["hopper"]["batch1_graph"]["tokens_per_s"]
        print(f"portable batch-1 decode at {100 * r:.1f}% of the Hopper path's (target: at least 80%)"
              f"{'' if r >= 0.8 else ': NOT MET'}")
PY
  note "portable exit $portable_status"
fi
moe_status=0
moe_part() { [[ " ${OPTIMATE_MOE_PARTS:-tests bench offline} " == *" $1 "* ]]; }
if want moe; then
  note "== Qwen3 and mixtures of experts: tests, Qwen3-30B-A3B and Qwen3-8B shapes (decode, prefill, offline)"
  if moe_part tests; then
    "$build/tests/test_cuda" --gtest_filter='*MoeRouteAlign*:*MoeGemm*:MoeKernels*:QkNorm*:*Qwen3MoeCuda*' \
      --gtest_output="json:$out/moe_tests.json" >"$out/moe_tests.log" 2>&1
    moe_status=$?
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$out/moe_tests.log" | tee -a "$summary"
    grep -E "Failure|expected|elements outside|Which is|Expected" "$out/moe_tests.log" | head -40
    grep -E "^Qwen3/MoE CUDA" "$out/moe_tests.log" | tee -a "$summary"
  fi
  if moe_part bench; then
    for run in "qwen3-30b-a3b none" "qwen3-30b-a3b fp8" "qwen3-8b none"; do
      read -r m q <<<"$run"
      "$build/cuda_moe_bench" --model "$root/configs/models/$m" --quantization "$q" \
        --out "$out/moe_bench_${m}_$q.json" >"$out/moe_bench_${m}_$q.log" 2>&1 || { moe_status=1; tail -5 "$out/moe_bench_${m}_$q.log"; }
    done
    python3 - "$out"/moe_bench_*.json <<'PY' | tee -a "$summary" || true
import json, sys
print("| model | weights | GB/token | batch 1 tok/s | ms/token | % copy BW | batch 64 tok/s | batch 256 tok/s | prefill 2048 ms |")
print("|---|---|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    try:
        j = json.load(open(path))
    except Exception as e:
        print(f"| {path} | no figures ({e}) |")
        continue
    b = j["batch1"]
    batched = {d["batch"]: d["output_tokens_per_s"] for d in j.get("batched_decode", [])}
    print(f"| {j['model'].split('/')[-1]} | {j['quantization']} | {b['bytes_per_token'] / 1e9:.2f} | "
          f"{b['tokens_per_s']:.1f} | {b['ms_per_token']:.2f} | {100 * b['fraction_of_copy_bandwidth']:.0f}% | "
          f"{batched.get(64, 0):.0f} | {batched.get(256, 0):.0f} | {j['prefill']['ms']:.1f} |")
PY
  fi
  if moe_part offline && [[ $full -eq 0 ]]; then
    skipped "moe offline"
    moe_status=1
  elif moe_part offline; then
    (cd "$root" && "$build/optimate" bench --workload configs/workloads/offline-1000-h200.toml \
       --compare h200-throughput-qwen3-30b-a3b,h200-throughput-qwen3-8b --backend cuda --out "$out/moe_offline") \
       >"$out/moe_offline.log" 2>&1 || moe_status=1
    grep -E "^\||KV cache of" "$out/moe_offline.log" | head -12 | tee -a "$summary"
    tail -3 "$out/moe_offline.log"
  fi
  note "moe exit $moe_status"
fi
# Every stage's status: the summary names each, and the script fails if any did.
stage_statuses=""
failed=0
for v in $(compgen -v | grep -E '^[a-z0-9]+_status$'); do
  stage_statuses+="${v%_status} exit ${!v:-?}, "
  [[ "${!v:-1}" == 0 ]] || failed=1
done
note "${stage_statuses%, }"
[[ $failed -eq 0 ]]
