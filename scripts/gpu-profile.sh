#!/usr/bin/env bash
# Hardware-counter profiles (Nsight Compute) of the attention kernels on the Llama-3-8B shape,
# for a machine with an NVIDIA GPU and ncu. Builds the attention benchmark, runs it, then
# profiles one launch of each kernel and writes under the folder given:
#   attention.json attention.log   cuda_attention_bench's figures (both decode kernels, prefill)
#   <kernel>.ncu-rep <kernel>.txt  the profile and its details page
#   build.log                      the build, with ptxas register and spill reports
# Usage: scripts/gpu-profile.sh OUT_DIR
# Clocks are left as the card has them (--clock-control none).
set -uo pipefail
out=${1:?usage: scripts/gpu-profile.sh OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${OPTIMATE_GPU_BUILD_DIR:-$root/build-gpu}
export PATH=/usr/local/cuda/bin:$PATH
if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPTIMATE_CUDA=ON \
    -DOPTIMATE_GPU_SUITE_ONLY=ON -DOPTIMATE_TESTS=ON -DCMAKE_CUDA_FLAGS=-Xptxas=-v \
    >"$out/configure.log" 2>&1 || { echo "configure FAILED"; tail -20 "$out/configure.log"; exit 1; }
fi
cmake --build "$build" --target cuda_attention_bench -j "$(nproc)" >"$out/build.log" 2>&1 ||
  { echo "build FAILED"; grep -E "error" "$out/build.log" | head -20; exit 1; }
bench=$build/cuda_attention_bench
"$bench" --out "$out/attention.json" | tee "$out/attention.log"
profile() {  # name, kernel regex, bench flags...
  local name=$1 regex=$2
  shift 2
  ncu --clock-control none --set full -k "regex:$regex" -c 1 -o "$out/$name" -f "$bench" "$@" \
    >"$out/$name.ncu.log" 2>&1 || { echo "ncu $name FAILED"; tail -5 "$out/$name.ncu.log"; return; }
  ncu --import "$out/$name.ncu-rep" --page details >"$out/$name.txt" 2>&1
  grep -E "Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Eligible Warps|Block Limit" "$out/$name.txt" | head -24
}
profile prefill_2048 prefill_attention_kernel --only prefill --layers 1
profile decode_tc_1024 paged_attention_tc_kernel --only decode --batches 1024 --layers 1
profile decode_cc_1024 paged_attention_kernel --only decode --batches 1024 --layers 1
profile decode_tc_1 paged_attention_tc_kernel --only decode --batches 1 --layers 1
