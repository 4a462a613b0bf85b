#!/bin/sh
# resume_latest.sh OUTPUT_DIR PROGRAM [ARGS...]: runs a BLIP-style training
# program in OUTPUT_DIR, resuming from its newest checkpoint_NN.pth when
# there is one. This is the part of a job script that torchrun leaves to the
# user and that a restarted or elastic job needs: collie-run (like torchrun)
# starts every attempt with the same command line, and the program itself
# must find where the last attempt got to. With --epochs N (or --epochs=N)
# among the arguments, a checkpoint of the last epoch means there is nothing
# left to train, and it exits 0.
#
#   collie-run --max-restarts 3 ... examples/resume_latest.sh /runs/j7 build/bin/blip_train --epochs 10
set -eu
out=$1
prog=$2
shift 2
# The one option read here, in both of the forms the programs accept.
epochs=""
prev=""
for arg in "$@"; do
  case $prev in --epochs) epochs=$arg ;; esac
  case $arg in --epochs=*) epochs=${arg#--epochs=} ;; esac
  prev=$arg
done
case $epochs in
  *[!0-9]*) echo "resume_latest: --epochs '$epochs' is not a number of epochs" >&2; exit 2 ;;
esac
latest=""
epoch=-1
# The highest epoch number, compared as a number: a glob sorts as text, and
# checkpoint_100.pth comes before checkpoint_99.pth.
for f in "$out"/checkpoint_[0-9]*.pth; do
  [ -e "$f" ] || continue
  n=$(basename "$f" .pth | sed 's/^checkpoint_//; s/^0*//')
  n=${n:-0}
  case $n in *[!0-9]*) continue ;; esac
  if [ "$n" -gt "$epoch" ]; then epoch=$n; latest=$f; fi
done
if [ -n "$latest" ]; then
  if [ -n "$epochs" ] && [ "$epoch" -ge $((epochs - 1)) ]; then
    echo "resume_latest: $latest is the last of $epochs epochs: nothing left to train"
    exit 0
  fi
  set -- "$@" --resume "$latest"
fi
exec "$prog" --output-dir "$out" "$@"
