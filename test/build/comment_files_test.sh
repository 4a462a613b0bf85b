#!/usr/bin/env bash
# check_comment_files.py on a planted tree (a comment naming a file that does
# not exist must fail, naming it; patterns and real names must not), then on
# collie's own tree.
set -euo pipefail
src=$1
here=$(dirname "${BASH_SOURCE[0]}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$tmp" init -q
mkdir -p "$tmp/a/b"
printf 'int x;  // see wire.h and a/b/wire.h, <name>_fuzz.cc, $tmp/y.cc, OUT_DIR/r.md\n' >"$tmp/a/b/wire.h"
printf '# built from config.h (config.h.in), nccl.h is NCCL'"'"'s\nx = 1\n' >"$tmp/a/tool.py"
touch "$tmp/a/config.h.in"
git -C "$tmp" add -A
python3 "$here/check_comment_files.py" "$tmp" >"$tmp/clean.out" ||
  { cat "$tmp/clean.out"; echo "a clean planted tree failed"; exit 1; }
printf '// Opens connections (bootstrap.cc implements it).\nint y;\n' >"$tmp/a/t.h"
git -C "$tmp" add -A
rc=0
python3 "$here/check_comment_files.py" "$tmp" >"$tmp/bad.out" || rc=$?
grep -q '^a/t.h:1: the comment names bootstrap.cc, which does not exist$' "$tmp/bad.out" && ((rc == 1)) ||
  { cat "$tmp/bad.out"; echo "a comment naming bootstrap.cc was not reported (exit $rc)"; exit 1; }
python3 "$here/check_comment_files.py" "$src"
