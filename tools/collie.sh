#!/usr/bin/env bash
# The two commands of the README:
#   bash tools/collie.sh main   install what is missing, build, run the main job
#   bash tools/collie.sh test   install what is missing, build, run every test
# Idempotent: packages already installed are not touched, an existing build
# directory is reused, and so are the Python virtual environments, which live
# outside the clone. Run as root on Debian 12 (apt-get is used only when a
# package is missing). Environment:
#   BUILD_DIR      build directory (default: build)
#   COLLIE_TORCH_VERSIONS  the torch releases (PyPI) the torch backend is built
#                  for and tested with: one virtual environment each, with
#                  collie_torch pip-installed (default: "2.11.0 2.15.0", the
#                  GPU machine's and the newest)
#   COLLIE_VENV_ROOT  where those environments live (default:
#                  ${XDG_CACHE_HOME:-~/.cache}/collie/venv-torch-<version>)
#   BUILD_TYPE     CMake build type (default: RelWithDebInfo)
#   CTEST_ARGS     extra arguments for ctest (e.g. "-R rendezvous")
#   CI             "true": build with -Werror, and no test but the GPU ones may skip
#   COLLIE_NPROC   ranks for the main job (default 4; global batch stays 256)
#   COLLIE_EPOCHS  epochs for the main job (default 10)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}

# Debian packages collie needs to build, test and benchmark. The peers (Gloo,
# Open MPI, PyTorch) are real dependencies of the tests and benches.
PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libasio-dev libeigen3-dev catch2 zlib1g-dev libcli11-dev nlohmann-json3-dev
  dataset-fashion-mnist
  # python3-venv/-dev: the virtual environments with torch 2.x from PyPI that
  # collie_torch is built against and tested in. Debian's python3-torch
  # (1.13) is the peer of the store tests' older TCPStore dialect.
  python3 python3-venv python3-dev python3-torch
  # Debian's torch calls whatever libblas.so.3 is installed; without this it
  # gets the reference BLAS, ~10x slower matmuls (docs/performance.md, DDP).
  libopenblas0-openmp
  libgloo-dev openmpi-bin libopenmpi-dev
  clang libclang-rt-14-dev clang-format-14
  iproute2 nftables procps psmisc
  # A real Slurm cluster in network namespaces for the scheduler tests
  # (test/support/slurm_cluster.h).
  munge slurmctld slurmd slurm-client
)

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if ((${#missing[@]} == 0)); then
    echo "collie: all ${#PACKAGES[@]} Debian packages present"
    return
  fi
  echo "collie: installing ${missing[*]}"
  local sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

TORCH_VERSIONS=${COLLIE_TORCH_VERSIONS:-"2.11.0 2.15.0"}
VENV_ROOT=${COLLIE_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/collie}
TORCH_VENVS=()

# One virtual environment per torch release: torch (its Linux wheels are CUDA
# builds that run on a CPU), numpy and pytest from PyPI, then collie_torch
# itself, built by `pip install .` against that torch. The environments
# outside the clone are reused: only what is missing is installed, and the
# wheel is rebuilt incrementally in $BUILD_DIR/wheel-torch-<version>.
setup_torch() {
  local v venv werror=()
  [[ "${CI:-}" == "true" ]] && werror=(--config-settings=cmake.define.COLLIE_WERROR=ON)
  for v in $TORCH_VERSIONS; do
    venv=$VENV_ROOT/venv-torch-$v
    if ! "$venv/bin/python" -c "import sys, torch, numpy, pytest; sys.exit(torch.__version__.split('+')[0] != '$v')" 2>/dev/null; then
      echo "collie: creating $venv (torch $v from PyPI)"
      rm -rf "$venv"
      mkdir -p "$VENV_ROOT"
      python3 -m venv "$venv"
      "$venv/bin/pip" install -q "torch==$v" numpy pytest
    fi
    # torchft for test/runtime/torch/test_torchft.py (torchft 0.2.0: a cp311
    # wheel, torch >= 2.7); parameterized is what torchft's own tests import.
    if ! "$venv/bin/python" -c "import torchft, parameterized" 2>/dev/null; then
      "$venv/bin/pip" install -q torchft==0.2.0 parameterized
    fi
    echo "collie: building collie_torch for torch $v (pip install . into $venv)"
    "$venv/bin/pip" install -q --no-deps --force-reinstall . \
      --config-settings=build-dir="$BUILD_DIR/wheel-torch-$v" "${werror[@]}"
    TORCH_VENVS+=("$venv")
  done
}

build() {
  local jobs
  jobs=$(nproc)
  # CI builds with -Werror: a new warning fails the run.
  local werror=OFF
  [[ "${CI:-}" == "true" ]] && werror=ON
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
      -DCOLLIE_WERROR="$werror" ${CMAKE_ARGS:-}
  fi
  # The torch tests run in every environment setup_torch made.
  local venvs
  venvs=$(IFS=';'; echo "${TORCH_VENVS[*]}")
  cmake "$BUILD_DIR" -DCOLLIE_TORCH_VENVS="$venvs" >/dev/null
  cmake --build "$BUILD_DIR" -j "$jobs"
}

run_main() {
  # The BLIP-style training sample on Fashion-MNIST: $nproc ranks on the CPU
  # socket backend under collie-run, which hosts the store (nothing else to
  # start). Prints the final test accuracy and where logs/checkpoints are.
  local nproc=${COLLIE_NPROC:-4} epochs=${COLLIE_EPOCHS:-10}
  rm -rf "$ROOT/output/blip_train"  # a fresh log.txt per run
  "$BUILD_DIR/bin/collie-run" --standalone --nproc-per-node "$nproc" --local-ranks-filter 0 \
    "$BUILD_DIR/bin/blip_train" --backend socket --epochs "$epochs" \
    --batch-size $((256 / nproc)) --print-freq 100 --output-dir "$ROOT/output/blip_train"
}

run_tests() {
  local jobs
  jobs=$(nproc)
  cd "$BUILD_DIR"
  # shellcheck disable=SC2086
  ctest --output-on-failure -j "$jobs" --timeout 600 ${CTEST_ARGS:-}
}

case "${1:-}" in
  main) install_packages; setup_torch; build; run_main ;;
  test) install_packages; setup_torch; build; run_tests ;;
  install) install_packages; setup_torch ;;
  build) install_packages; setup_torch; build ;;
  *) echo "usage: bash tools/collie.sh main|test|install|build" >&2; exit 2 ;;
esac
