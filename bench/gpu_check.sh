#!/usr/bin/env bash
# bench/gpu_check.sh: the GPU checks, as one prepared script for an NVIDIA
# machine that has nvcc, CMake and ninja but no package manager and no
# network. The header-only dependencies travel with the source in .deps/
# (ignored by git), filled here beforehand by `bash tools/gpu_deps.sh`.
#
# It builds collie with CUDA and NCCL for Hopper (sm_90), runs the GPU test
# executables, then times NCCL's all_reduce called directly against the same
# call through collie's NcclProcessGroup (same stream, CUDA events), and
# prints that table last. With one GPU NCCL runs with world size 1; with more
# it uses them all. It also runs the CUDA MLP against the Eigen one
# (test_gpu_nn). Budget: a few minutes.
#
#   bash bench/gpu_check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-results}}
mkdir -p "$out"
build=${GPU_BUILD_DIR:-build-gpu}
start=$(date +%s)

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt" || true
if [[ ! -f .deps/include/asio.hpp ]]; then
  echo "gpu_check: .deps/include/asio.hpp missing: run 'bash tools/gpu_deps.sh' on a machine with the Debian packages first" >&2
  exit 2
fi

cuda_root=${CUDA_HOME:-/usr/local/cuda}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCOLLIE_WITH_CUDA=ON -DCOLLIE_WITH_NCCL=ON -DCOLLIE_CUDA_ROOT="$cuda_root" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCOLLIE_BUILD_SAMPLES=OFF \
  2>&1 | tee "$out/configure.log" | tail -5
ninja -C "$build" test_gpu_nccl test_gpu_nn nccl_overhead 2>&1 | tee "$out/build.log" | tail -3
[[ -x "$build/bin/test_gpu_nccl" ]] || { echo "gpu_check: build failed" >&2; exit 1; }
echo "== built in $(( $(date +%s) - start ))s"

echo "== GPU tests"
"$build/bin/test_gpu_nccl" 2>&1 | tee "$out/test_gpu_nccl.log" | tail -15
tests_rc=${PIPESTATUS[0]}
echo "== the CUDA MLP against the Eigen MLP (nn/cuda)"
"$build/bin/test_gpu_nn" 2>&1 | tee "$out/test_gpu_nn.log" | tail -15
nn_rc=${PIPESTATUS[0]}
(( tests_rc == 0 )) && tests_rc=$nn_rc

echo "== NCCL direct vs collie NcclProcessGroup"
"$build/bin/nccl_overhead" -b 4 -e 268435456 -f 4 -n 100 -w 20 2>&1 | tee "$out/nccl_overhead.txt"
echo "== total $(( $(date +%s) - start ))s; GPU tests exit $tests_rc"
exit "$tests_rc"
