#!/usr/bin/env bash
# Runs collie and its peers side by side on this machine: float32 sum
# all_reduce, sizes MIN..MAX bytes (x FACTOR), world sizes WORLDS, every
# rank on this host: collie over shared memory (its default on one host) and
# over TCP loopback, Open MPI over TCP and over shared memory (vader), Gloo
# and torch over TCP. Measures T (one loopback TCP stream) and the memcpy
# rate in the same run, then
# writes OUT_DIR/results.md (side-by-side table with ratios) and
# OUT_DIR/busbw_N<n>.png and time_N<n>.png (gnuplot).
#
#   bench/compare/run_compare.sh build out/compare
#   WORLDS="2" MAX=$((64<<20)) bench/compare/run_compare.sh build out/quick
#
# Peers: Gloo's ring all_reduce (libgloo-dev), Open MPI's MPI_Allreduce
# (--mca btl tcp,self, and --mca btl vader,self for shared memory),
# torch.distributed with gloo (/usr/bin/python3 with python3-torch). A peer
# whose program is missing is skipped with a note. PEERS narrows the set.
set -euo pipefail

BUILD=${1:?usage: run_compare.sh BUILD_DIR OUT_DIR}
OUT=${2:?usage: run_compare.sh BUILD_DIR OUT_DIR}
WORLDS=${WORLDS:-"2 4"}
MIN=${MIN:-4}
MAX=${MAX:-$((256 << 20))}
FACTOR=${FACTOR:-4}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
ALGO=${ALGO:-auto}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(cd "$BUILD" && pwd)/bin
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

note() { echo "run_compare: $*" >&2; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
  echo "kernel: $(uname -r)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/machine.txt"

"$BIN/tcp_stream" > "$OUT/tcp_stream.txt"
cat "$OUT/tcp_stream.txt" >&2

# Each runner writes "bytes time_us algbw busbw" lines to $OUT/<peer>_N<n>.txt.
# collie runs --blocking: every peer below waits for each call before the
# next, so collie does too.
collie_over() {  # collie_over TRANSPORT N NAME
  "$BIN/collie-bench" --nproc "$2" --transport "$1" -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" \
      -w "$WARMUP" --algo "$ALGO" --blocking -c 0 --json "$OUT/$3_N$2.json" \
    | awk '$1 ~ /^[0-9]+$/ { print $1, $6, $7, $8 }' > "$OUT/$3_N$2.txt"
}
run_collie() { collie_over auto "$1" collie; }
run_collie_tcp() { collie_over tcp "$1" collie_tcp; }

run_gloo() {
  [[ -x "$BIN/gloo_allreduce" ]] || { note "gloo_allreduce not built; skipping Gloo"; return; }
  local dir pids=() r
  dir=$(mktemp -d)
  for ((r = 1; r < $1; r++)); do
    "$BIN/gloo_allreduce" "$r" "$1" "$dir" "$MIN" "$MAX" "$FACTOR" "$ITERS" "$WARMUP" > /dev/null &
    pids+=($!)
  done
  "$BIN/gloo_allreduce" 0 "$1" "$dir" "$MIN" "$MAX" "$FACTOR" "$ITERS" "$WARMUP" > "$OUT/gloo_N$1.txt"
  wait "${pids[@]}"
  rm -rf "$dir"
}

mpi_over() {  # mpi_over BTL N NAME
  [[ -x "$BIN/mpi_allreduce" ]] || { note "mpi_allreduce not built; skipping Open MPI"; return; }
  mpirun --allow-run-as-root --oversubscribe --mca btl "$1,self" -np "$2" \
      "$BIN/mpi_allreduce" "$MIN" "$MAX" "$FACTOR" "$ITERS" "$WARMUP" > "$OUT/$3_N$2.txt"
}
run_mpi() { mpi_over tcp "$1" mpi; }
run_mpi_sm() { mpi_over vader "$1" mpi_sm; }

run_torch() {
  /usr/bin/python3 -c 'import torch.distributed' 2> /dev/null || { note "no torch in /usr/bin/python3; skipping"; return; }
  local dir pids=() r
  dir=$(mktemp -d)
  for ((r = 1; r < $1; r++)); do
    /usr/bin/python3 "$HERE/torch_gloo.py" "$r" "$1" "$dir/init" "$MIN" "$MAX" "$FACTOR" "$ITERS" "$WARMUP" > /dev/null &
    pids+=($!)
  done
  /usr/bin/python3 "$HERE/torch_gloo.py" 0 "$1" "$dir/init" "$MIN" "$MAX" "$FACTOR" "$ITERS" "$WARMUP" > "$OUT/torch_N$1.txt"
  wait "${pids[@]}"
  rm -rf "$dir"
}

PEERS=${PEERS:-"collie collie_tcp gloo mpi mpi_sm torch"}
for n in $WORLDS; do
  for peer in $PEERS; do
    note "N=$n $peer"
    "run_$peer" "$n"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"

python3 "$HERE/merge_results.py" "$OUT" $WORLDS > "$OUT/results.md"
cat "$OUT/results.md"

if command -v gnuplot > /dev/null; then
  T=$(awk '/tcp_stream_gbps/ { print $2 }' "$OUT/tcp_stream.txt")
  for n in $WORLDS; do
    plots=()
    for peer in $PEERS; do
      [[ -s "$OUT/${peer}_N$n.txt" ]] && plots+=("'$OUT/${peer}_N$n.txt' using 1:4 with linespoints title '$peer'")
    done
    plots+=("$T/$n with lines dashtype 2 title 'T/N (one TCP stream / N)'")
    gnuplot <<GP
set terminal pngcairo size 900,560
set output '$OUT/busbw_N$n.png'
set title 'all\\_reduce float32 sum, N=$n ranks on one host'
set logscale x 2
set format x '%.0b%BB'
set xlabel 'message size'
set ylabel 'bus bandwidth (GB/s)'
set key top left
set grid
plot $(IFS=,; echo "${plots[*]}")
GP
    times=()
    for peer in $PEERS; do
      [[ -s "$OUT/${peer}_N$n.txt" ]] && times+=("'$OUT/${peer}_N$n.txt' using 1:2 with linespoints title '$peer'")
    done
    gnuplot <<GP
set terminal pngcairo size 900,560
set output '$OUT/time_N$n.png'
set title 'all\\_reduce float32 sum, N=$n ranks on one host: time per call'
set logscale xy
set format x '%.0b%BB'
set xlabel 'message size'
set ylabel 'time per all\\_reduce (us)'
set key top left
set grid
plot $(IFS=,; echo "${times[*]}")
GP
  done
fi
