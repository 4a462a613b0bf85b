#!/usr/bin/env bash
# clang-format-14 over every C++ file git tracks (the style is .clang-format).
#   tools/format.sh           rewrite the files in place
#   tools/format.sh --check   list the files that differ and exit 1 (ctest runs this)
# Exits 77 (skipped) when clang-format-14 is missing, unless CI=true, where the
# test command has installed it and a missing one is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v clang-format-14 >/dev/null; then
  echo "format: clang-format-14 is not installed (Debian package clang-format-14)" >&2
  [[ "${CI:-}" == "true" ]] && exit 1
  exit 77
fi

mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.cu' '*.cuh' | grep -v '^test/fuzz/corpus/')
if [[ "${1:-}" == "--check" ]]; then
  bad=()
  for f in "${files[@]}"; do
    if ! clang-format-14 --dry-run --Werror "$f" 2>/dev/null; then bad+=("$f"); fi
  done
  if ((${#bad[@]})); then
    echo "format: ${#bad[@]} file(s) differ from .clang-format; run tools/format.sh:" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files formatted"
else
  clang-format-14 -i "${files[@]}"
fi
