#!/usr/bin/env bash
# examples/resume_latest.sh reads --epochs in both of the forms blip_train
# accepts, --epochs N and --epochs=N: with the last epoch's checkpoint in the
# folder it trains nothing and exits 0; with epochs left it starts the
# program resuming from the newest checkpoint. A stand-in program records
# its arguments.
# Usage: resume_latest_test.sh SOURCE_DIR
set -uo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat >"$tmp/prog" <<'SH'
#!/bin/sh
printf '%s\n' "$@" >"$(dirname "$0")/prog.args"
SH
chmod +x "$tmp/prog"
mkdir "$tmp/out"
for e in 0 1 2; do echo x >"$tmp/out/checkpoint_0$e.pth"; done

# run ARGS...: resume_latest.sh on the folder; its output in $tmp/log.
run() {
  rm -f "$tmp/prog.args"
  timeout 60 /bin/sh "$src/examples/resume_latest.sh" "$tmp/out" "$tmp/prog" "$@" >"$tmp/log" 2>&1
}

for form in "--epochs 3" "--epochs=3"; do
  echo "== $form, checkpoint_02.pth: nothing left to train"
  # shellcheck disable=SC2086  # the form is words on purpose
  run --lr 0.1 $form
  rc=$?
  cat "$tmp/log"
  ((rc == 0)) || fail "exit $rc with $form"
  grep -q "checkpoint_02.pth is the last of 3 epochs: nothing left to train" "$tmp/log" ||
    fail "$form was not read as 3 epochs"
  [[ ! -e $tmp/prog.args ]] || fail "the program ran with $form: $(cat "$tmp/prog.args")"
done

for form in "--epochs 5" "--epochs=5"; do
  echo "== $form, checkpoint_02.pth: resumes from it"
  # shellcheck disable=SC2086
  run $form
  rc=$?
  cat "$tmp/log"
  ((rc == 0)) || fail "exit $rc with $form"
  [[ -f $tmp/prog.args ]] || fail "the program did not run with $form"
  [[ $(tr '\n' ' ' <"$tmp/prog.args") == "--output-dir $tmp/out $form --resume $tmp/out/checkpoint_02.pth " ]] ||
    fail "the program's arguments: $(tr '\n' ' ' <"$tmp/prog.args")"
done

echo "== --epochs=ten: refused, naming it"
run --epochs=ten
rc=$?
cat "$tmp/log"
((rc == 2)) || fail "exit $rc for --epochs=ten"
grep -q "resume_latest: --epochs 'ten' is not a number" "$tmp/log" || fail "no message naming --epochs 'ten'"
[[ ! -e $tmp/prog.args ]] || fail "the program ran with --epochs=ten"
echo PASS
