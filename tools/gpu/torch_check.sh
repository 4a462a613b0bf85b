#!/usr/bin/env bash
# tools/gpu/torch_check.sh: collie_torch on a GPU machine, as one prepared
# script. The machine has python3 with a CUDA torch 2.x, NCCL as the pip
# wheel (nvidia/nccl), nvcc, CMake, ninja, scikit-build-core and pytest, and
# no network. The header-only dependencies travel in .deps/ (ignored by git),
# filled beforehand by `bash tools/gpu_deps.sh` on a Debian machine.
#
# It builds and installs collie_torch into that python3 exactly as a user
# does (pip install ., without build isolation since nothing can be
# fetched), for Hopper (sm_90) with the NCCL of torch's wheel; then runs the
# CUDA tests (test/runtime/torch/test_torch_cuda.py: every op on CUDA
# tensors against torch's nccl backend, streams and Work, a DDP step,
# "cpu:collie,cuda:nccl"; one rank per GPU, so world size 1 on a one-GPU
# machine) and the CPU op test as a check of the same build; last it times
# dist.all_reduce of CUDA tensors through collie and through torch's nccl.
# Budget: a few minutes (the build is most of it).
#
#   bash tools/gpu/torch_check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-torch-results}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
start=$(date +%s)

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt" || true
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())" | tee -a "$out/gpu.txt"
if [[ ! -f .deps/include/asio.hpp ]]; then
  echo "gpu_torch_check: .deps/include/asio.hpp missing: run 'bash tools/gpu_deps.sh' on a machine with the Debian packages first" >&2
  exit 2
fi
nccl_root=$("$py" -c "import nvidia.nccl as n; print(list(n.__path__)[0])") || {
  echo "gpu_torch_check: $py has no nvidia.nccl (torch's NCCL wheel)" >&2
  exit 2
}

echo "== pip install . (NCCL from $nccl_root)"
"$py" -m pip install --no-build-isolation --no-deps --force-reinstall . \
  --config-settings=build-dir=build-gpu-torch \
  --config-settings=cmake.define.COLLIE_WITH_CUDA=ON \
  --config-settings=cmake.define.COLLIE_WITH_NCCL=ON \
  --config-settings=cmake.define.COLLIE_NCCL_ROOT="$nccl_root" \
  --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90 >"$out/build.log" 2>&1
build_rc=$?
tail -3 "$out/build.log"
if (( build_rc != 0 )); then
  echo "gpu_torch_check: pip install failed (exit $build_rc); $out/build.log has the rest" >&2
  grep -m5 -iE "error|failed" "$out/build.log" >&2
  exit 1
fi
"$py" -c "import collie_torch; print('collie_torch:', collie_torch.CUDA)" | tee -a "$out/gpu.txt"
echo "== built and installed in $(( $(date +%s) - start ))s"

echo "== the CUDA tests, and the CPU op test of the same build"
tests_rc=0
cd test/runtime/torch
for id in test_torch_cuda.py::test_cuda_ops_match_nccl test_torch_cuda.py::test_cuda_streams_and_work \
          test_torch_cuda.py::test_cuda_ddp_step_matches_nccl \
          test_torch_cuda.py::test_cpu_collie_cuda_nccl_on_gpu \
          "test_torch.py::test_operations_match_gloo[2-collie]"; do
  COLLIE_BIN_DIR=/nonexistent timeout 300 "$py" run_pytest.py "$id" >"$out/test.log.tmp" 2>&1
  rc=$?
  cat "$out/test.log.tmp" >>"$out/tests.log"
  if (( rc == 0 )); then verdict=passed
  elif (( rc == 77 )); then verdict="skipped: $(grep -m1 SKIP "$out/test.log.tmp")"
  else verdict="FAILED (exit $rc)"; tests_rc=1
  fi
  echo "$id: $verdict"
done
cd ../../..

echo "== dist.all_reduce of CUDA tensors: collie vs torch's nccl, us per call (world size 1)"
timeout 300 "$py" - <<'PY' 2>&1 | tee "$out/allreduce_cuda.txt"
import os, time, torch, torch.distributed as dist
import collie_torch  # noqa: F401
if not torch.cuda.is_available():
    raise SystemExit("no GPU: torch.cuda.is_available() is False; nothing to time")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29581")
torch.cuda.set_device(0)
dist.init_process_group("collie", rank=0, world_size=1)
nccl = dist.new_group(backend="nccl")
print("| bytes | collie us | nccl us | nccl/collie |")
print("| --- | --- | --- | --- |")
n = 4
while n <= 256 << 20:
    t = torch.ones(n // 4, device="cuda")
    row = []
    for group in (None, nccl):
        for _ in range(10):
            dist.all_reduce(t, group=group)
        torch.cuda.synchronize()
        iters = max(10, min(1000, (1 << 30) // n))
        best = float("inf")
        for _ in range(3):
            s = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t, group=group)
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - s) * 1e6 / iters)
        row.append(best)
    print(f"| {n} | {row[0]:.2f} | {row[1]:.2f} | {row[1] / row[0]:.2f} |", flush=True)
    n *= 16
dist.destroy_process_group()
PY
echo "== done in $(( $(date +%s) - start ))s"
exit $tests_rc
