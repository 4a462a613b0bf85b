#!/usr/bin/env bash
# The commands of the README:
#   bash tools/collie.sh main   install what the main job needs, build its two
#                               programs, run it (no torch, no tests)
#   bash tools/collie.sh test   install everything, make the torch environments,
#                               build every target, run every test
#   bash tools/collie.sh torch  make the torch environments (collie_torch
#                               pip-installed into each, and the frameworks'
#                               environment on the 2.11.0 one) and nothing else
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
#   COLLIE_MAIN_OUTPUT  the main job's output folder, emptied at its start
#                  (default: output/blip_train in the clone)
# One `main` at a time per output folder: a second one started while the
# first runs stops at once, naming the first (lock_main). The file can also
# be sourced (the tests of test/build/ do) to call its functions: sourcing
# runs no command.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
MAIN_OUTPUT=${COLLIE_MAIN_OUTPUT:-$ROOT/output/blip_train}

# Debian packages. MAIN_PACKAGES are what the main job needs: a compiler,
# CMake and Ninja, the libraries collie-run and blip_train are built from,
# and the dataset. TEST_PACKAGES are the rest, for the tests and benches:
# the peers (Gloo, Open MPI, PyTorch) are real dependencies of those.
MAIN_PACKAGES=(
  build-essential cmake ninja-build
  libasio-dev libeigen3-dev libcli11-dev nlohmann-json3-dev libssl-dev zlib1g-dev
  dataset-fashion-mnist
)
TEST_PACKAGES=(
  pkg-config git catch2
  # The torch environments' builds of collie_torch share their objects.
  ccache
  # python3-venv/-dev: the virtual environments with torch 2.x from PyPI that
  # collie_torch is built against and tested in. Debian's python3-torch
  # (1.13) is the peer of the store tests' older TCPStore dialect.
  python3 python3-venv python3-dev python3-torch python3-matplotlib
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
PACKAGES=("${MAIN_PACKAGES[@]}" "${TEST_PACKAGES[@]}")

# install_packages [package...]: those of the list (default: PACKAGES) that
# are missing.
install_packages() {
  local missing=() wanted=("$@")
  ((${#wanted[@]})) || wanted=("${PACKAGES[@]}")
  for p in "${wanted[@]}"; do
    # Not `dpkg-query | grep -q`: grep -q exits at the first match, and
    # under pipefail a writer it leaves behind fails with SIGPIPE (141).
    if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != "install ok installed" ]]; then
      missing+=("$p")
    fi
  done
  if ((${#missing[@]} == 0)); then
    echo "collie: all ${#wanted[@]} Debian packages present"
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

# Whether the virtual environment $1 has a pip that runs. Every pip call is
# `python -m pip`: bin/pip may be missing, or a script whose #! names an
# interpreter that is gone, while the module works, and the other way round.
venv_pip_ok() {
  "$1/bin/python" -m pip --version >/dev/null 2>&1
}

# Whether torch $2, numpy and pytest import in the virtual environment $1.
torch_imports() {
  "$1/bin/python" -c "import sys, torch, numpy, pytest; sys.exit(torch.__version__.split('+')[0] != '$2')" 2>/dev/null
}

# Whether $1 is a usable torch $2 environment: those import, and pip runs.
torch_venv_ok() {
  torch_imports "$1" "$2" && venv_pip_ok "$1"
}

# Gives the virtual environment $1, whose python runs, a working pip again
# with ensurepip, keeping what it has installed (torch's gigabytes).
repair_pip() {
  "$1/bin/python" -m ensurepip --upgrade >/dev/null 2>&1 && venv_pip_ok "$1"
}

# Makes $1 a new virtual environment, with a pip that runs.
new_venv() {
  rm -rf "$1"
  mkdir -p "$(dirname "$1")"
  python3 -m venv "$1"
  if ! venv_pip_ok "$1"; then
    echo "collie: $1/bin/python -m pip --version fails in a new virtual environment (is python3-venv installed?)" >&2
    return 1
  fi
}

# One virtual environment per torch release: torch (its Linux wheels are CUDA
# builds that run on a CPU), numpy and pytest from PyPI, then collie_torch
# itself, built by `pip install .` against that torch. The environments
# outside the clone are reused: only what is missing is installed, and the
# wheel is rebuilt incrementally in $BUILD_DIR/wheel-torch-<version>.
setup_torch() {
  local v venv werror=() launcher=()
  [[ "${CI:-}" == "true" ]] && werror=(--config-settings=cmake.define.COLLIE_WERROR=ON)
  # Each environment's build compiles collie's C++ layers with the same
  # flags, and only collie_torch's own files against its torch: through
  # ccache, with paths taken relative to the checkout, the second build
  # compiles those files alone.
  if command -v ccache >/dev/null; then
    launcher=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache
      --config-settings=cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache)
    export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT}
  fi
  for v in $TORCH_VERSIONS; do
    venv=$VENV_ROOT/venv-torch-$v
    if ! torch_venv_ok "$venv" "$v"; then
      # Only pip broken (torch imports): repaired in place. Anything else:
      # a new environment, as a broken torch would stay broken under a
      # `pip install` that finds it installed.
      if torch_imports "$venv" "$v" && repair_pip "$venv"; then
        echo "collie: repaired pip in $venv (python -m ensurepip)"
      else
        echo "collie: creating $venv (torch $v from PyPI)"
        new_venv "$venv"
        "$venv/bin/python" -m pip install -q "torch==$v" numpy pytest
      fi
    fi
    # torchft for test/runtime/torch/test_torchft.py (torchft 0.2.0: a cp311
    # wheel, torch >= 2.7); parameterized is what torchft's own tests import.
    # safetensors: test/samples/blip_safetensors_torch.py reads blip_train's
    # checkpoint with it.
    if ! "$venv/bin/python" -c "import torchft, parameterized, safetensors" 2>/dev/null; then
      "$venv/bin/python" -m pip install -q torchft==0.2.0 parameterized safetensors
    fi
    echo "collie: building collie_torch for torch $v (python -m pip install . into $venv)"
    "$venv/bin/python" -m pip install -q --no-deps --force-reinstall . \
      --config-settings=build-dir="$BUILD_DIR/wheel-torch-$v" "${werror[@]}" "${launcher[@]}"
    TORCH_VENVS+=("$venv")
  done
}

# The frameworks the tests of test/frameworks train under (Lightning,
# Accelerate, DeepSpeed, Ray Train), in an environment of their own on top of
# the torch 2.11.0 one (test/frameworks/make_venv.sh: torch is not
# downloaded again, and the torch environment is left as it was). Made once;
# a later run only checks it.
setup_frameworks() {
  local torch_venv=$VENV_ROOT/venv-torch-2.11.0 venv=$VENV_ROOT/venv-frameworks-2.11.0
  if [[ ! -x $torch_venv/bin/python ]]; then
    echo "collie: no torch 2.11.0 environment ($torch_venv): the frameworks' tests will say so"
    return 0
  fi
  if "$venv/bin/python" -c "import lightning, accelerate, deepspeed, ray.train" 2>/dev/null; then
    return 0
  fi
  echo "collie: creating $venv (Lightning, Accelerate, DeepSpeed, Ray Train from PyPI)"
  bash test/frameworks/make_venv.sh "$torch_venv" "$venv"
}

# configure [cmake args...]: the build folder, made once with Ninja, then
# reconfigured with the arguments given. CMAKE_ARGS come last, so that they
# win over the defaults the callers pass.
configure() {
  # CI builds with -Werror: a new warning fails the run.
  local cmake_werror=OFF ci_flags=()
  if [[ "${CI:-}" == "true" ]]; then
    cmake_werror=ON
    # Nothing in CI reads debug information, and -g is about a third of the
    # compile time: CI's RelWithDebInfo is -O2 -DNDEBUG, the same code.
    if [[ "$BUILD_TYPE" == RelWithDebInfo ]]; then
      ci_flags=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG"
        "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG" "-DCMAKE_CUDA_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG")
    fi
  fi
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    # shellcheck disable=SC2086  # CMAKE_ARGS is a list of words on purpose
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
      -DCOLLIE_WERROR="$cmake_werror" "${ci_flags[@]}" "$@" ${CMAKE_ARGS:-} >/dev/null
  elif (($#)); then
    # shellcheck disable=SC2086
    cmake "$BUILD_DIR" "$@" ${CMAKE_ARGS:-} >/dev/null
  fi
}

# Every target, tests and benches included.
build() {
  # The torch tests run in every environment setup_torch made.
  local venvs
  venvs=$(IFS=';'; echo "${TORCH_VENVS[*]}")
  configure -DCOLLIE_BUILD_TESTS=ON -DCOLLIE_BUILD_BENCH=ON -DCOLLIE_WITH_CUDA=AUTO \
    -DCOLLIE_WITH_NCCL=AUTO -DCOLLIE_TORCH_VENVS="$venvs" \
    -DCOLLIE_FRAMEWORKS_VENV="$VENV_ROOT/venv-frameworks-2.11.0"
  cmake --build "$BUILD_DIR" -j "$(nproc)"
}

# Only what the main job runs: collie-run and blip_train. A new build folder
# is configured without tests and benches (which need TEST_PACKAGES) and
# without the GPU parts (the main job runs on the CPU); one that has them
# keeps them (`test` turns them on).
build_main() {
  if [[ -f "$BUILD_DIR/build.ninja" ]]; then
    configure
  else
    configure -DCOLLIE_BUILD_TESTS=OFF -DCOLLIE_BUILD_BENCH=OFF -DCOLLIE_WITH_CUDA=OFF \
      -DCOLLIE_WITH_NCCL=OFF
  fi
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target collie-run blip_train
}

# The main job's lock: an exclusive flock(1) on a file next to its output
# folder, .<folder>.lock (output/.blip_train.lock), taken before anything
# else and held on fd 9 until the job ends, by its programs too (collie-run
# and blip_train inherit it: a job whose script was killed still holds it).
# A second `main` fails at once, naming the first; it removes nothing. The
# file holds the holder's PID; it is never deleted (a new file would be a
# second lock).
lock_main() {
  local lock
  lock=$(dirname "$MAIN_OUTPUT")/.$(basename "$MAIN_OUTPUT").lock
  mkdir -p "$(dirname "$lock")"
  exec 9>>"$lock"  # >>: opening it must not erase the holder's line
  local rc=0
  flock -n 9 || rc=$?
  if ((rc > 1)); then
    echo "collie: flock -n on $lock failed (exit $rc)" >&2
    exit 1
  elif ((rc == 1)); then  # another process holds it
    local holder pid
    holder=$(head -c 200 "$lock" 2>/dev/null) || true
    pid=${holder#PID }
    pid=${pid%% *}
    if [[ -z $holder ]]; then
      holder="a run that has not written its PID yet"
    elif ! kill -0 "$pid" 2>/dev/null; then
      holder="$holder; that process has ended, but a program it started still holds the lock: fuser -v $lock names it"
    fi
    echo "collie: another 'tools/collie.sh main' is running with output in $MAIN_OUTPUT: $holder." >&2
    echo "collie: this one stops without touching it; run again when that one has ended (it holds $lock)." >&2
    exit 1
  fi
  printf 'PID %s (tools/collie.sh main, started %s)\n' "$BASHPID" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$lock"
}

run_main() {
  # The BLIP-style training sample on Fashion-MNIST: $nproc ranks on the CPU
  # socket backend under collie-run, which hosts the store (nothing else to
  # start). Prints the final test accuracy and where logs/checkpoints are.
  # Called under lock_main: no other main job writes the folder it empties.
  local nproc=${COLLIE_NPROC:-4} epochs=${COLLIE_EPOCHS:-10}
  rm -rf "$MAIN_OUTPUT"  # a fresh log.txt per run
  "$BUILD_DIR/bin/collie-run" --standalone --nproc-per-node "$nproc" --local-ranks-filter 0 \
    "$BUILD_DIR/bin/blip_train" --backend socket --epochs "$epochs" \
    --batch-size $((256 / nproc)) --print-freq 100 --output-dir "$MAIN_OUTPUT"
}

run_tests() {
  local jobs
  jobs=$(nproc)
  cd "$BUILD_DIR"
  # shellcheck disable=SC2086
  ctest --output-on-failure -j "$jobs" --timeout 600 ${CTEST_ARGS:-}
}

# Sourced (by a test): the functions only.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

case "${1:-}" in
  # The lock first, so that a second main fails at once. The installation
  # and the build run without fd 9: a daemon that apt-get starts (munge,
  # slurmd) must not keep the lock after the job.
  main) lock_main; install_packages "${MAIN_PACKAGES[@]}" 9>&-; build_main 9>&-; run_main ;;
  test) install_packages; setup_torch; setup_frameworks; build; run_tests ;;
  torch) install_packages; setup_torch; setup_frameworks ;;
  install) install_packages; setup_torch; setup_frameworks ;;
  build) install_packages; setup_torch; setup_frameworks; build ;;
  *) echo "usage: bash tools/collie.sh main|test|torch|install|build" >&2; exit 2 ;;
esac
