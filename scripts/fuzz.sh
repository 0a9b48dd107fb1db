#!/usr/bin/env bash
# Bounded fuzzing with libFuzzer + ASan/UBSan of what reads untrusted input: the model-file
# parsers (GGUF, safetensors), the server's JSON parser and request parsing (client_json), and
# the structured-output grammar path, limits and compile (grammar).
#   scripts/fuzz.sh [SECONDS]        # each fuzzer runs SECONDS (default 60)
# Builds only the fuzz targets (and the libraries they link) in a separate clang build,
# OPTIMATE_FUZZ_BUILD_DIR (default build-fuzz). Fails when a fuzzer finds a crash, a leak,
# undefined behaviour or an input that needs more than 2 GiB; the input is left in
# build-fuzz/findings/ and can be replayed with `build-fuzz/fuzz/<name>_fuzz <file>`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${1:-60}
build_dir=${OPTIMATE_FUZZ_BUILD_DIR:-build-fuzz}

if [ ! -f "$build_dir/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DOPTIMATE_FUZZ=ON -DOPTIMATE_TESTS=OFF -DOPTIMATE_BENCHMARKS=OFF -DOPTIMATE_CUDA=OFF >/dev/null
fi
fuzzers=(gguf safetensors client_json grammar)
cmake --build "$build_dir" --target "${fuzzers[@]/%/_fuzz}" -j "$(nproc)"

mkdir -p "$build_dir/findings"
status=0
for name in "${fuzzers[@]}"; do
  # New inputs go to a scratch corpus so the checked-in seeds stay small.
  work="$build_dir/corpus/$name"
  mkdir -p "$work"
  echo "== fuzzing $name for ${seconds}s"
  if ! "$build_dir/fuzz/${name}_fuzz" "$work" "fuzz/corpus/$name" \
      -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=8192 -timeout=10 \
      -artifact_prefix="$build_dir/findings/${name}-" -print_final_stats=1 2>"$build_dir/${name}.log"; then
    echo "fuzz: $name failed; last lines of $build_dir/${name}.log:" >&2
    tail -n 40 "$build_dir/${name}.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$build_dir/${name}.log" | tail -n 2
  fi
done
exit $status
