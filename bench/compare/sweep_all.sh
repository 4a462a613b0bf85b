#!/usr/bin/env bash
# The whole one-host comparison of docs/performance.md ("Every collective
# against the fastest peer") in one command: every collective, N=2 and
# N=4, 4 B to 256 MiB (x4), collie against Open MPI over vader (its default
# coll components, tuned and han first) and DeepSpeed's shm all_reduce in 5
# alternating repetitions of up to 5000 calls per size; then Gloo's own
# algorithms and torch 2.11's and 2.15's gloo, whose small calls take
# 0.1-5 ms, in 3 repetitions of up to 100 calls per size. Writes into
# OUT_DIR: OUT_DIR/fast and OUT_DIR/slow (each run_compare.sh's output),
# OUT_DIR/all.json (the merged records), OUT_DIR/all.md (every table, with
# collie's speed-up over the fastest peer), OUT_DIR/plots/<collective>_N<n>.svg,
# and prints the summary.
#
#   bench/compare/sweep_all.sh build out/sweep      # about 45 minutes on 2 cores
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
if [[ $# -ne 2 ]]; then
  echo "usage: bench/compare/sweep_all.sh BUILD_DIR OUT_DIR" >&2
  exit 2
fi
BUILD=$1 OUT=$2
mkdir -p "$OUT/fast" "$OUT/slow"
export COLLECTIVES=all WORLDS="2 4" MIN=4 MAX=256M FACTOR=4
ITERS=5000 WARMUP=50 ITER_BYTES=512M REPS=5 PEERS="collie mpi_sm mpi_tuned mpi_han deepspeed" \
  "$HERE/run_compare.sh" "$BUILD" "$OUT/fast" > "$OUT/fast/log.txt"
ITERS=100 WARMUP=5 ITER_BYTES=256M REPS=3 PEERS="gloo torch211 torch215" \
  "$HERE/run_compare.sh" "$BUILD" "$OUT/slow" > "$OUT/slow/log.txt"
/usr/bin/python3 "$HERE/merge_results.py" "$OUT/fast" "$OUT/slow" --fastest \
  --json "$OUT/all.json" --md "$OUT/all.md" --plot "$OUT/plots" > /dev/null
/usr/bin/python3 "$HERE/merge_results.py" "$OUT/all.json" --summary 4,64,1K,16K,256K,4M,64M,256M
