#!/usr/bin/env bash
# Runs collie and its peers side by side on this machine: float32 sum
# all_reduce, sizes MIN..MAX bytes (x FACTOR), world sizes WORLDS, every rank
# on this host: collie over shared memory (its default on one host) and over
# TCP loopback, Open MPI over TCP and over shared memory (vader), Gloo and
# torch over TCP. The work is done by allreduce_compare.py; this script keeps
# the settings in environment variables. Writes, into OUT_DIR:
#   results.json         the records (bench_results.py's schema)
#   OUT_DIR/results.md   one table per world size, also printed
#   all_reduce_N<n>.svg  time and bus bandwidth per size
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)

usage() {
  cat <<'EOF'
usage: bench/compare/run_compare.sh BUILD_DIR OUT_DIR

all_reduce (float32 sum) of collie against Open MPI (TCP and shared memory),
Gloo and torch.distributed's gloo, every rank on this host.

Settings (environment variables):
  WORLDS="2 4"        world sizes
  MIN=4 MAX=268435456 smallest and largest size in bytes (64K, 16M also work)
  FACTOR=4            size step factor
  ITERS=20 WARMUP=5   timed and warm-up calls per size
  ALGO=auto           collie-bench --algo
  PEERS="collie collie_tcp gloo mpi mpi_sm torch"
                      which runs: collie (its default transport), collie_tcp,
                      gloo, mpi (Open MPI TCP), mpi_sm (Open MPI vader), torch
  REPS=1              times the whole set is run, alternating (medians and
                      min-max over them in the tables and plots)
  TORCH_PYTHON=/usr/bin/python3
                      the Python with torch for the torch peer

Writes OUT_DIR/results.json, results.md and all_reduce_N<n>.svg. Redraw from
the JSON with bench/compare/merge_results.py OUT_DIR --plot OUT_DIR.

  bench/compare/run_compare.sh build out/compare
  WORLDS="2" MAX=$((64<<20)) bench/compare/run_compare.sh build out/quick
EOF
}

case "${1:-}" in -h | --help) usage; exit 0 ;; esac
if [[ $# -ne 2 ]]; then usage >&2; exit 2; fi

# shellcheck disable=SC2086  # WORLDS and PEERS are lists
exec /usr/bin/python3 "$HERE/allreduce_compare.py" --build "$1" --out "$2" \
  --worlds ${WORLDS:-2 4} --min "${MIN:-4}" --max "${MAX:-$((256 << 20))}" \
  --factor "${FACTOR:-4}" --iters "${ITERS:-20}" --warmup "${WARMUP:-5}" \
  --algo "${ALGO:-auto}" --reps "${REPS:-1}" \
  --peers ${PEERS:-collie collie_tcp gloo mpi mpi_sm torch} \
  --torch-python "${TORCH_PYTHON:-/usr/bin/python3}"
