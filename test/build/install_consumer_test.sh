#!/usr/bin/env bash
# Installs the current build into a temporary prefix, builds a tiny
# out-of-tree project against it with find_package(collie), and runs it.
set -euo pipefail
cmake=$1 build_dir=$2 consumer=$3 embed=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cmake" --install "$build_dir" --prefix "$tmp/prefix" >/dev/null
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
"$cmake" -S "$consumer" -B "$tmp/build" "${gen[@]}" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log"; exit 1; }
"$cmake" --build "$tmp/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
out=$("$tmp/build/collie_consumer")
echo "$out"
grep -q "^consumer log: start$" <<<"$out"
grep -q "^collie " <<<"$out"
grep -q "^store ok: value=world counter=5$" <<<"$out"
grep -q "^nn ok: .* decreased$" <<<"$out"

# Only the declared public headers are installed, all under include/collie/,
# and each compiles on its own (none includes a header that was left out) and
# includes collie's headers only as "collie/...".
inc="$tmp/prefix/include/collie"
outside=$(find "$tmp/prefix/include" -mindepth 1 -maxdepth 1 ! -name collie)
[[ -z $outside ]] || { echo "installed outside include/collie/: $outside"; exit 1; }
bad=$(grep -rnE '^\s*#\s*include\s+"' "$inc" | grep -vE '#\s*include\s+"collie/' || true)
[[ -z $bad ]] || { echo "installed headers include paths outside collie/: $bad"; exit 1; }
! find "$inc" -path '*/launcher/*' | grep -q . || { echo "launcher headers were installed"; exit 1; }
! find "$inc" -name 'transport.h' | grep -q . || { echo "collectives internals were installed"; exit 1; }
count=0
while IFS= read -r h; do
  rel=collie/${h#"$inc"/}
  printf '#include <%s>\n' "$rel" | c++ -std=c++20 -fsyntax-only -x c++ -I"$consumer/include" -I"$tmp/prefix/include" \
    -I/usr/include/eigen3 - || { echo "installed header $rel does not compile on its own"; exit 1; }
  count=$((count + 1))
done < <(find "$inc" -name '*.h' | sort)
echo "$count installed headers compile on their own"

# samples/embed: a data-parallel program built against the installed collie,
# run with 2 ranks under collie-run.
if [[ -n "$embed" ]]; then
  "$cmake" -S "$embed" -B "$tmp/embed" "${gen[@]}" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/embed.log" 2>&1 ||
    { cat "$tmp/embed.log"; exit 1; }
  "$cmake" --build "$tmp/embed" >>"$tmp/embed.log" 2>&1 || { cat "$tmp/embed.log"; exit 1; }
  out=$(timeout 120 "$build_dir/bin/collie-run" --standalone --nproc-per-node 2 "$tmp/embed/embed_app" 2>&1)
  echo "$out"
  grep -q "embed_app: 2 ranks, replicas identical: yes" <<<"$out"
  # A bad launch environment: one line naming it and exit 1, not std::terminate.
  rc=0
  err=$(RANK=abc WORLD_SIZE=2 "$tmp/embed/embed_app" 2>&1) || rc=$?
  if [[ $rc != 1 ]] || ! grep -q "^embed_app: RANK='abc'" <<<"$err"; then
    echo "embed_app with RANK=abc: exit $rc, expected 1 and a line naming RANK: $err"
    exit 1
  fi
fi
