#!/usr/bin/env bash
# tools/collie.sh main, one at a time: its lock (lock_main) and its run
# (run_main, which empties the output folder), sourced from the script and
# run with a stand-in collie-run, as `main` runs them after the build:
#  - while a first run trains, a second fails at once, naming the first's
#    PID, and leaves the first's output folder as it was;
#  - once the first has ended, the next run is accepted (and starts afresh);
#  - a run whose shell was killed while its programs go on still holds the
#    lock, and the refusal says so.
# The runs say where they are through a pipe and wait on a FIFO: no sleeps.
# Usage: collie_sh_main_lock_test.sh SOURCE_DIR
set -uo pipefail
export src=$1
command -v flock >/dev/null || { echo "SKIP: no flock (util-linux)"; exit 77; }
tmp=$(mktemp -d)
trap 'exec 3<&-; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# collie-run ... --output-dir DIR: appends "run $FAKE_RUN" to DIR/log.txt,
# prints "running <its parent's PID>" and, with FAKE_GATE, waits for a line
# on that FIFO, then lets the lock go (it has it from collie.sh, on fd 9, as
# the real collie-run and blip_train have) and prints "ended".
mkdir -p "$tmp/build/bin"
cat >"$tmp/build/bin/collie-run" <<'SH'
#!/bin/bash
out=${*: -1}
mkdir -p "$out"
echo "run $FAKE_RUN" >>"$out/log.txt"
echo "running $PPID"
if [[ -n ${FAKE_GATE:-} ]]; then
  read -r _ <"$FAKE_GATE"
  exec 9>&-
  echo ended
fi
SH
chmod +x "$tmp/build/bin/collie-run"
mkfifo "$tmp/gate"
out=$tmp/output/blip_train
export BUILD_DIR=$tmp/build COLLIE_MAIN_OUTPUT=$out

# main_run N: what `main` does after the build, as run N.
main_run() {
  FAKE_RUN=$1 bash -c 'source "$1"; lock_main; run_main' _ "$src/tools/collie.sh"
}
# start_run N: run N in the background, held at the gate; its lines (the
# stand-in's "running PID" and "ended", and "exited RC" once its shell has
# been reaped) come on fd 3.
start_run() {
  exec 3< <(FAKE_GATE=$tmp/gate main_run "$1" 2>"$tmp/run$1.err"; echo "exited $?")
  local line
  read -r line <&3 || fail "run $1 said nothing"
  [[ $line == running\ * ]] || { cat "$tmp/run$1.err"; fail "run $1 did not start its job: $line"; }
  holder=${line#running }
}
# expect LINE WHAT [LOG]: the next line on fd 3 is LINE.
expect() {
  local line
  read -r line <&3 || line="nothing (all its writers have ended)"
  [[ $line == "$1" ]] || { [[ -n ${3:-} ]] && cat "$3"; fail "$2: want '$1', got $line"; }
}

echo "== run 1 trains; run 2, started meanwhile, fails at once"
start_run 1
SECONDS=0
timeout 60 bash -c "$(declare -f main_run); main_run 2" >"$tmp/run2.out" 2>&1
rc=$?
cat "$tmp/run2.out"
((rc != 0)) || fail "run 2 was accepted while run 1 ran"
((rc != 124)) || fail "run 2 waited for run 1 instead of failing at once"
((SECONDS < 30)) || fail "run 2 took ${SECONDS}s to fail"
grep -q "another 'tools/collie.sh main' is running with output in $out: PID $holder " "$tmp/run2.out" ||
  fail "run 2's message does not name run 1 (PID $holder)"
[[ $(cat "$out/log.txt") == "run 1" ]] || fail "run 1's output changed: $(cat "$out/log.txt")"
echo go >"$tmp/gate"
expect ended "run 1's collie-run"
expect "exited 0" "run 1" "$tmp/run1.err"

echo "== run 1 has ended: run 3 is accepted and starts afresh"
main_run 3 >"$tmp/run3.out" 2>&1 || { cat "$tmp/run3.out"; fail "run 3 was refused after run 1 ended"; }
[[ $(cat "$out/log.txt") == "run 3" ]] || fail "run 3's output: $(cat "$out/log.txt")"

echo "== run 4's shell is killed while its collie-run goes on: run 5 is refused, saying so"
start_run 4
kill -KILL "$holder"
expect "exited 137" "run 4's shell (SIGKILL)"
main_run 5 >"$tmp/run5.out" 2>&1
rc=$?
cat "$tmp/run5.out"
((rc != 0)) || fail "run 5 was accepted while run 4's collie-run ran"
grep -q "PID $holder .*that process has ended, but a program it started still holds the lock: fuser -v" \
  "$tmp/run5.out" || fail "run 5's message does not say that run 4's programs hold the lock"
[[ $(cat "$out/log.txt") == "run 4" ]] || fail "run 4's output changed: $(cat "$out/log.txt")"
echo go >"$tmp/gate"
expect ended "run 4's collie-run"
main_run 6 >"$tmp/run6.out" 2>&1 || { cat "$tmp/run6.out"; fail "run 6 was refused after run 4's programs ended"; }
echo PASS
