#!/usr/bin/env bash
# tools/gpu/stage.sh: the first half of the device check, run here. Builds
# the GPU executables for Hopper (sm_90) with this machine's CUDA toolkit and
# NCCL headers, strips them, and puts them with the Fashion-MNIST files into
# gpu-stage/ (ignored by git), which the device tool carries to the GPU
# machine; tools/gpu/check.sh runs them there. That machine has the CUDA
# runtime and NCCL only as pip wheels (nvidia/*/lib under python3's
# site-packages, libnccl.so.2 and no libnccl.so), so nothing is built there.
#
#   bash tools/gpu/stage.sh            # then, on the device:
#   bash tools/gpu/check.sh gpu-stage "$OUT"
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${GPU_BUILD_DIR:-build-gpu}
stage=${GPU_STAGE_DIR:-gpu-stage}
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLLIE_WITH_CUDA=ON \
  -DCOLLIE_WITH_NCCL=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCOLLIE_BUILD_SAMPLES=ON >/dev/null
targets=(test_gpu_nccl test_gpu_nn test_gpu_ddp test_contract_nccl nccl_overhead blip_train
  collie-run)
cmake --build "$build" --target "${targets[@]}"

rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/data"
for t in "${targets[@]}"; do
  cp "$build/bin/$t" "$stage/bin/"
  strip "$stage/bin/$t"
done
cp bench/nccl_overhead/torch_all_reduce.py "$stage/bin/"
cp "$data"/*-ubyte.gz "$stage/data/"
# What the binaries need at run time besides libc: the device must supply
# each (check.sh points LD_LIBRARY_PATH at the wheels' folders).
ldd "$stage/bin/test_gpu_nccl" | awk '/not found|cuda|nccl/ {print $1}' | sort -u \
  >"$stage/needs.txt"
echo "staged in $stage ($(du -sh "$stage" | cut -f1)); run-time libraries: $(tr '\n' ' ' <"$stage/needs.txt")"
