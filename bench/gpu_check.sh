#!/usr/bin/env bash
# bench/gpu_check.sh: the GPU checks, as one prepared script for an NVIDIA
# machine that has nvcc, CMake and ninja but no package manager and no
# network. The header-only dependencies travel with the source in .deps/
# (ignored by git), filled here beforehand by `bash tools/gpu_deps.sh`.
#
# It builds collie with CUDA and NCCL for Hopper (sm_90), runs the GPU test
# executables (the NCCL backend test and the ProcessGroup contract suite on
# NCCL), then times NCCL's all_reduce called directly against the same
# call through collie's NcclProcessGroup (same stream, CUDA events), and
# prints that table last. With one GPU NCCL runs with world size 1; with more
# it uses them all. It also runs the CUDA MLP against the Eigen one
# (test_gpu_nn), DDP on the CUDA model over NCCL (test_gpu_ddp: N ranks equal
# one process on the global batch, c10d's buckets as device buffers, no_sync;
# one rank per GPU, so the cross-rank averaging needs two GPUs or more), and
# a short `blip_train --device cuda` run under collie-run (one rank per GPU,
# synthetic data). blip_train needs zlib's headers; without them the build
# falls back to no samples and says the run was skipped. Budget: a few
# minutes.
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
configure() {
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCOLLIE_WITH_CUDA=ON -DCOLLIE_WITH_NCCL=ON -DCOLLIE_CUDA_ROOT="$cuda_root" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCOLLIE_BUILD_SAMPLES="$1" >"$out/configure.log" 2>&1
}
samples=ON
if ! configure ON; then
  echo "gpu_check: configure with the samples failed (zlib headers missing?); building without blip_train" >&2
  tail -5 "$out/configure.log" >&2
  samples=OFF
  configure OFF || { tail -20 "$out/configure.log" >&2; echo "gpu_check: configure failed" >&2; exit 1; }
fi
targets=(test_gpu_nccl test_gpu_nn test_gpu_ddp test_contract_nccl nccl_overhead)
[[ $samples == ON ]] && targets+=(blip_train collie-run)
ninja -C "$build" "${targets[@]}" 2>&1 | tee "$out/build.log" | tail -3
for t in "${targets[@]}"; do
  [[ -x "$build/bin/$t" ]] || { echo "gpu_check: build failed ($t missing)" >&2; exit 1; }
done
echo "== built in $(( $(date +%s) - start ))s"

echo "== GPU tests"
"$build/bin/test_gpu_nccl" 2>&1 | tee "$out/test_gpu_nccl.log" | tail -15
tests_rc=${PIPESTATUS[0]}
echo "== the CUDA MLP against the Eigen MLP (nn/cuda)"
"$build/bin/test_gpu_nn" 2>&1 | tee "$out/test_gpu_nn.log" | tail -15
nn_rc=${PIPESTATUS[0]}
(( tests_rc == 0 )) && tests_rc=$nn_rc
echo "== DDP on the CUDA model over NCCL (nn/ddp + nn/cuda)"
"$build/bin/test_gpu_ddp" 2>&1 | tee "$out/test_gpu_ddp.log" | tail -15
ddp_rc=${PIPESTATUS[0]}
(( tests_rc == 0 )) && tests_rc=$ddp_rc
echo "== the ProcessGroup contract suite on NCCL (each world size needs that many GPUs; larger ones exit 77)"
contract_rc=0
contract_cases=()
for n in 1 2 3 4 5 6 7 8; do contract_cases+=("every op x dtype x reduce op at world size $n"); done
contract_cases+=("wrong sizes*" "a call mismatched*" "a stopped peer*" "a killed peer*")
for name in "${contract_cases[@]}"; do
  COLLIE_CONTRACT_BACKEND=nccl "$build/bin/test_contract_nccl" -w NoTests "$name" >"$out/contract.log.tmp" 2>&1
  rc=$?
  cat "$out/contract.log.tmp" >>"$out/test_contract_nccl.log"
  if (( rc == 0 )); then verdict=passed
  elif (( rc == 77 )); then verdict="skipped: $(grep -m1 SKIP "$out/contract.log.tmp")"
  else verdict="FAILED (exit $rc)"; contract_rc=$rc
  fi
  echo "contract nccl: $name: $verdict"
done
rm -f "$out/contract.log.tmp"
(( tests_rc == 0 )) && tests_rc=$contract_rc
echo "== DDP across two GPUs (the cross-rank shape check; exit 77 = skipped with one GPU)"
"$build/bin/test_gpu_ddp" "[two_gpus]" 2>&1 | tee "$out/test_gpu_ddp_two.log" | tail -5
two_rc=${PIPESTATUS[0]}
(( two_rc == 77 )) && two_rc=0
(( tests_rc == 0 )) && tests_rc=$two_rc

if [[ $samples == ON ]]; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  (( ngpu >= 1 )) || ngpu=1
  echo "== blip_train --device cuda: $ngpu rank(s), DDP over NCCL, synthetic data, 2 short epochs"
  timeout 300 "$build/bin/collie-run" --standalone --nproc-per-node "$ngpu" \
    "$build/bin/blip_train" --device cuda --synthetic --epochs 2 --max-steps 40 --print-freq 20 \
    --dist-eval --output-dir "$out/blip_train_cuda" 2>&1 | tee "$out/blip_train_cuda.log" | tail -12
  blip_rc=${PIPESTATUS[0]}
  if (( blip_rc == 0 )) && ! grep -q "final test accuracy" "$out/blip_train_cuda.log"; then blip_rc=1; fi
  (( tests_rc == 0 )) && tests_rc=$blip_rc
else
  echo "== blip_train --device cuda: skipped (built without the samples)"
fi

echo "== NCCL direct vs collie NcclProcessGroup"
"$build/bin/nccl_overhead" -b 4 -e 268435456 -f 4 -n 100 -w 20 2>&1 | tee "$out/nccl_overhead.txt"
echo "== total $(( $(date +%s) - start ))s; GPU tests exit $tests_rc"
exit "$tests_rc"
