#!/usr/bin/env bash
# Runs collie and its peers side by side on this machine: the COLLECTIVES
# (default float32 sum all_reduce), sizes MIN..MAX bytes (x FACTOR), world
# sizes WORLDS, every rank on this host: collie over shared memory (its
# default on one host) and over TCP loopback, Open MPI over TCP and over
# shared memory (vader, with its coll components), Gloo and torch over TCP,
# DeepSpeed's shm all_reduce. The work is done by allreduce_compare.py; this
# script keeps the settings in environment variables. Writes, into OUT_DIR:
#   results.json            the records (bench_results.py's schema)
#   OUT_DIR/results.md      one table per collective and world size, also printed
#   <collective>_N<n>.svg   time (all_reduce: and bus bandwidth) per size
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)

usage() {
  cat <<'EOF'
usage: bench/compare/run_compare.sh BUILD_DIR OUT_DIR

Collectives (default all_reduce, float32 sum) of collie against Open MPI (TCP
and shared memory), Gloo, torch.distributed's gloo and DeepSpeed, every rank
on this host.

Settings (environment variables):
  COLLECTIVES=all_reduce
                      any of all_reduce broadcast reduce all_gather
                      reduce_scatter gather scatter all_to_all
                      all_to_all_uneven pingpong stream, or "all"
  WORLDS="2 4"        world sizes (pingpong and stream: N=2 only)
  MIN=4 MAX=268435456 smallest and largest size in bytes (64K, 16M also work)
  FACTOR=4            size step factor
  ITERS=20 WARMUP=5   timed and warm-up calls per size
  ITER_BYTES=0        0, or at most this many bytes' worth of timed calls per
                      size (1G with ITERS=20000: many calls at 4 B, few at 256M)
  ALGO=auto           collie-bench --algo
  PEERS="collie collie_tcp gloo mpi mpi_sm torch"
                      which runs: collie (its default transport), collie_tcp,
                      gloo, mpi (Open MPI TCP), mpi_sm (Open MPI vader),
                      mpi_tuned / mpi_han / mpi_collsm (vader with that coll
                      component in front), torch (TORCH_PYTHON's), torch211,
                      torch215 (the venvs' torch), deepspeed (all_reduce only)
  REPS=1              times the whole set is run, alternating (medians and
                      min-max over them in the tables and plots)
  TORCH_PYTHON=/usr/bin/python3
                      the Python with torch for the torch peer
  TORCH211_PYTHON, TORCH215_PYTHON, DEEPSPEED_PYTHON
                      default ~/.cache/collie/venv-torch-2.11.0/bin/python,
                      venv-torch-2.15.0, venv-frameworks-2.11.0 (deepspeed)

Writes OUT_DIR/results.json, results.md and <collective>_N<n>.svg. Redraw
from the JSON with bench/compare/merge_results.py OUT_DIR --plot OUT_DIR.

  bench/compare/run_compare.sh build out/compare
  WORLDS="2" MAX=$((64<<20)) bench/compare/run_compare.sh build out/quick
  COLLECTIVES=all PEERS="collie mpi_sm mpi_tuned gloo torch211 torch215 deepspeed" \
    ITERS=20000 ITER_BYTES=1G REPS=5 bench/compare/run_compare.sh build out/all
EOF
}

case "${1:-}" in -h | --help) usage; exit 0 ;; esac
if [[ $# -ne 2 ]]; then usage >&2; exit 2; fi

VENVS=$HOME/.cache/collie
# shellcheck disable=SC2086  # WORLDS, PEERS and COLLECTIVES are lists
exec /usr/bin/python3 "$HERE/allreduce_compare.py" --build "$1" --out "$2" \
  --worlds ${WORLDS:-2 4} --min "${MIN:-4}" --max "${MAX:-$((256 << 20))}" \
  --factor "${FACTOR:-4}" --iters "${ITERS:-20}" --warmup "${WARMUP:-5}" \
  --iter-bytes "${ITER_BYTES:-0}" --algo "${ALGO:-auto}" --reps "${REPS:-1}" \
  --collectives ${COLLECTIVES:-all_reduce} \
  --peers ${PEERS:-collie collie_tcp gloo mpi mpi_sm torch} \
  --torch-python "${TORCH_PYTHON:-/usr/bin/python3}" \
  --torch211-python "${TORCH211_PYTHON:-$VENVS/venv-torch-2.11.0/bin/python}" \
  --torch215-python "${TORCH215_PYTHON:-$VENVS/venv-torch-2.15.0/bin/python}" \
  --deepspeed-python "${DEEPSPEED_PYTHON:-$VENVS/venv-frameworks-2.11.0/bin/python}"
