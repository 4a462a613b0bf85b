#!/usr/bin/env bash
# COLLIE_WITH_CUDA / COLLIE_WITH_NCCL:
#  - ON on a machine without the toolkit fails at configure time, clearly;
#  - OFF configures without looking and builds the CPU layers;
#  - AUTO finds the toolkit where it is installed (checked on the main build).
set -uo pipefail
cmake=$1 src=$2 main_build=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# A PATH without nvcc and a toolkit root that does not exist: "no toolkit".
nocuda_env=(env -u CUDACXX -u CUDA_PATH PATH=/usr/sbin:/usr/bin:/sbin:/bin)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)

echo "== ON without a toolkit must fail at configure time"
if "${nocuda_env[@]}" "$cmake" -S "$src" -B "$tmp/on" "${gen[@]}" -DCOLLIE_WITH_CUDA=ON \
    -DCOLLIE_CUDA_ROOT=/nonexistent -DCOLLIE_BUILD_TESTS=OFF >"$tmp/on.log" 2>&1; then
  cat "$tmp/on.log"; fail "configure with COLLIE_WITH_CUDA=ON and no toolkit succeeded"
fi
grep -q "COLLIE_WITH_CUDA=ON but no CUDA toolkit was found" "$tmp/on.log" ||
  { cat "$tmp/on.log"; fail "no clear message"; }
grep -A3 "COLLIE_WITH_CUDA=ON" "$tmp/on.log" | head -5

echo "== NCCL ON without a toolkit must fail too"
if "${nocuda_env[@]}" "$cmake" -S "$src" -B "$tmp/nccl" "${gen[@]}" -DCOLLIE_WITH_NCCL=ON \
    -DCOLLIE_CUDA_ROOT=/nonexistent -DCOLLIE_BUILD_TESTS=OFF >"$tmp/nccl.log" 2>&1; then
  fail "configure with COLLIE_WITH_NCCL=ON and no toolkit succeeded"
fi
grep -q "COLLIE_WITH_NCCL=ON but NCCL was not found" "$tmp/nccl.log" || { cat "$tmp/nccl.log"; fail "no clear NCCL message"; }

echo "== AUTO without a toolkit configures the CPU parts"
"${nocuda_env[@]}" "$cmake" -S "$src" -B "$tmp/auto" "${gen[@]}" -DCOLLIE_CUDA_ROOT=/nonexistent \
  -DCOLLIE_BUILD_TESTS=OFF -DCOLLIE_BUILD_BENCH=OFF -DCOLLIE_BUILD_SAMPLES=OFF >"$tmp/auto.log" 2>&1 ||
  { cat "$tmp/auto.log"; fail "AUTO configure without toolkit failed"; }
grep -q "no CUDA toolkit found" "$tmp/auto.log" || fail "AUTO did not report the missing toolkit"

echo "== OFF builds the CPU layers without CUDA or NCCL"
# Unoptimised and without debug information: the build is checked for
# compiling and linking, and -O0 without -g takes 60% of the time (154 s
# against 255 s on 2 cores).
"$cmake" -S "$src" -B "$tmp/off" "${gen[@]}" -DCOLLIE_WITH_CUDA=OFF -DCOLLIE_WITH_NCCL=OFF \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
  -DCOLLIE_BUILD_TESTS=OFF -DCOLLIE_BUILD_BENCH=OFF -DCOLLIE_BUILD_SAMPLES=OFF >"$tmp/off.log" 2>&1 ||
  { cat "$tmp/off.log"; fail "OFF configure failed"; }
grep -q "#define COLLIE_HAVE_NCCL 0" "$tmp/off/generated/collie/base/config.h" || fail "OFF: config.h says NCCL"
grep -q "#define COLLIE_HAVE_CUDA 0" "$tmp/off/generated/collie/base/config.h" || fail "OFF: config.h says CUDA"
"$cmake" --build "$tmp/off" --target collie_api collie_nn >"$tmp/off-build.log" 2>&1 ||
  { tail -50 "$tmp/off-build.log"; fail "OFF build of collie_api and collie_nn failed"; }

echo "== AUTO where the toolkit is installed builds the GPU targets"
if [[ -x /usr/local/cuda/bin/nvcc && -f /usr/local/cuda/include/nccl.h ]]; then
  grep -q "#define COLLIE_HAVE_NCCL 1" "$main_build/generated/collie/base/config.h" ||
    fail "the toolkit and nccl.h are installed but the main (AUTO) build did not enable NCCL"
  [[ -n $(find "$main_build" -name 'libcollie_nccl.a' -o -name 'libcollie_nccl.so' | head -1) ]] ||
    fail "AUTO: collie_nccl was not built"
  [[ -n $(find "$main_build" -name 'libcollie_cuda.a' -o -name 'libcollie_cuda.so' | head -1) ]] ||
    fail "AUTO: collie_cuda was not built"
else
  echo "(no CUDA toolkit in /usr/local/cuda here: AUTO-with-toolkit not checked)"
fi
echo "all GPU option checks passed"
