#!/usr/bin/env bash
# The GEMM path's elementwise kernels on a GPU machine: their tests (each kernel against its CPU
# twin, the runner with them against the baseline kernels, the FP8 runner against the CPU FP8
# runner), then one benchmark run that sets the current kernels against the baseline
# (cuda_decode_bench --elementwise 1: each kernel alone at 2048 and 8192 rows, the 1 x 2048 and
# 32 x 256 prefill breakdowns with bf16 and FP8 weights). Writes under OUT_DIR:
#   elementwise_tests.log/json   the tests
#   elementwise.json             the figures; elementwise.txt the same as a table
# Usage: scripts/gpu-elementwise.sh OUT_DIR   (gpu-check.sh runs it as its `elementwise` stage)
set -uo pipefail
out=${1:?usage: scripts/gpu-elementwise.sh OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
build=${OPTIMATE_GPU_BUILD_DIR:-$root/build-gpu}
export PATH=/usr/local/cuda/bin:$PATH
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPTIMATE_CUDA=ON -DOPTIMATE_TESTS=ON \
    >"$out/elementwise_configure.log" 2>&1 || { tail -20 "$out/elementwise_configure.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" --target test_cuda cuda_decode_bench >"$out/elementwise_build.log" 2>&1 ||
  { tail -30 "$out/elementwise_build.log"; exit 1; }
status=0
"$build/tests/test_cuda" \
  --gtest_filter='RmsNormResidual.*:SiluMul.*:ElementwiseFp8.*:Rope*:KvCacheWrite.*:Fp8.*:Fp8Runner.*:CudaRunner.*:*RunnerVsReference*' \
  --gtest_output="json:$out/elementwise_tests.json" >"$out/elementwise_tests.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$out/elementwise_tests.log"
grep -E "Failure|expected|elements outside|bytes differ|Which is" "$out/elementwise_tests.log" | head -40
"$build/cuda_decode_bench" --elementwise 1 --out "$out/elementwise.json" >/dev/null 2>"$out/elementwise.txt" || status=1
cat "$out/elementwise.txt"
exit $status
