#!/usr/bin/env bash
# Builds collie and runs its test suite under the sanitizers:
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer  (build dir build-asan)
#   tsan  ThreadSanitizer                                (build dir build-tsan)
# Usage: tools/sanitize.sh [asan|tsan|all] [build|test|both]   (default: all both)
# Environment:
#   JOBS          parallel compile jobs (default 2; the build machine is shared)
#   CTEST_JOBS    parallel tests (default 2)
#   TSAN_TESTS    ctest -R regex for the ThreadSanitizer run (default: every test)
#   CTEST_ARGS    extra ctest arguments for both runs (e.g. "-R collectives")
#   TARGETS       ninja targets to build instead of everything (e.g.
#                 "test_collectives test_rendezvous"; pair it with CTEST_ARGS)
#   CXX           compiler (default: the system's, g++ on Debian 12)
#
# The CUDA/NCCL parts are off: the sanitizers do not see into the GPU and the
# CUDA runtime's own allocations drown the reports. Every sanitizer report,
# from the test executables and from every process they start (collie-run,
# workers, collie-store), is written to <build dir>/sanitizer-logs/<kind>.<pid>;
# the script prints the first frames of each at the end and fails when there
# is any, even if the test that started the process passed.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
WHICH=${1:-all}
STEP=${2:-both}
JOBS=${JOBS:-2}
CTEST_JOBS=${CTEST_JOBS:-2}
TSAN_TESTS=${TSAN_TESTS:-}
read -r -a EXTRA_CTEST <<<"${CTEST_ARGS:-}"

# Tests that cannot run under a sanitizer for reasons outside collie's code:
#   build: ...  configure and compile fresh trees (an installed collie, the
#               CUDA/NCCL switches) with the sanitizer flags baked into the
#               exported targets but not into the consumer's link; they test
#               the build system, which the normal suite covers.
#   gpu: ...    need a GPU and CUDA, which sanitizer builds leave out.
EXCLUDE='^(build|gpu): '

configure_and_build() {  # <build dir> <sanitizers>
  local dir=$1 sanitizers=$2
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCOLLIE_SANITIZE="$sanitizers" -DCOLLIE_WITH_CUDA=OFF -DCOLLIE_WITH_NCCL=OFF \
    -DCOLLIE_FUZZ=OFF >"$dir.cmake.log" 2>&1 || { cat "$dir.cmake.log"; return 1; }
  local targets
  read -r -a targets <<<"${TARGETS:-}"
  ninja -C "$dir" -j"$JOBS" "${targets[@]}"
}

# Prints the first frames of every report in <log dir>; returns 1 if any.
summarize_reports() {  # <log dir>
  local logs=$1 found=0 f
  for f in "$logs"/*; do
    [[ -s $f ]] || continue
    found=1
    echo "---- $f"
    grep -m1 -E 'ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error:' "$f" || head -1 "$f"
    grep -m6 -E '^ +#[0-9]+ ' "$f" || true
  done
  return $found
}

# Every Catch2 test executable that was built must list its tests under the
# sanitizer: one that crashes while listing (as all did under TSan while the
# AVX2 ifunc resolvers ran before the TSan runtime) registers no tests with
# ctest, and the run would pass without running them.
check_discovery() {  # <build dir>
  local dir=$1 bad=0 exe n
  for exe in "$ROOT/$dir"/bin/test_*; do
    [[ -x $exe ]] || continue
    case $(basename "$exe") in test_gpu_*) continue ;; esac
    # Catch2 v2 exits with the number of tests it listed, so the status says
    # nothing; a crash shows as an empty list.
    n=$({ "$exe" --list-test-names-only 2>/dev/null || true; } | grep -c . || true)
    if [[ $n -eq 0 ]]; then
      echo "== $(basename "$exe") lists no tests under the sanitizer (crashed at start?)"
      bad=1
    fi
  done
  return $bad
}

run_tests() {  # <build dir> <report name> [ctest args...]
  local dir=$1 name=$2
  shift 2
  check_discovery "$dir" || return 1
  local logs="$ROOT/$dir/sanitizer-logs"
  rm -rf "$logs"
  mkdir -p "$logs"
  local start=$SECONDS rc=0
  # halt_on_error: the first report ends the process, so a test cannot pass
  # with one. log_path: children's reports are kept too (their stderr often
  # goes to a file the test deletes).
  ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1:log_path=$logs/asan" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logs/ubsan" \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:log_path=$logs/tsan" \
    ctest --test-dir "$dir" -j"$CTEST_JOBS" --output-on-failure --no-tests=error \
      -E "$EXCLUDE" "${EXTRA_CTEST[@]}" "$@" 2>&1 | tee "$ROOT/$dir/sanitize-ctest.log" || rc=1
  echo "== $name: ctest finished in $((SECONDS - start)) s (exit ${rc})"
  if ! summarize_reports "$logs"; then
    echo "== $name: sanitizer reports above (full text in $logs)"
    rc=1
  else
    echo "== $name: no sanitizer reports"
  fi
  return $rc
}

status=0
if [[ $WHICH == asan || $WHICH == all ]]; then
  [[ $STEP == test ]] || configure_and_build build-asan address,undefined
  [[ $STEP == build ]] || run_tests build-asan "ASan+UBSan" || status=1
fi
if [[ $WHICH == tsan || $WHICH == all ]]; then
  [[ $STEP == test ]] || configure_and_build build-tsan thread
  if [[ $STEP != build ]]; then
    if [[ -n $TSAN_TESTS ]]; then
      run_tests build-tsan "TSan" -R "$TSAN_TESTS" || status=1
    else
      run_tests build-tsan "TSan" || status=1
    fi
  fi
fi
exit $status
