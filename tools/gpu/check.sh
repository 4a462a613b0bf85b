#!/usr/bin/env bash
# tools/gpu/check.sh: the device check, on the GPU machine, with what
# tools/gpu/stage.sh built and staged here (the executables for sm_90 and
# the Fashion-MNIST files). Nothing is built there: the CUDA runtime and NCCL
# come from the pip wheels under python3's site-packages (nvidia/*/lib),
# which LD_LIBRARY_PATH points at.
#
# It runs, each under a time limit, and ends with one summary table:
#  1. test_gpu_nccl: NcclProcessGroup on every visible GPU (ops, Work
#     contract, CUDA-graph capture and 1,000 replays, errors);
#  2. test_gpu_nn under compute-sanitizer memcheck (the CUDA MLP against the
#     Eigen one);
#  3. test_gpu_ddp: DDP on the CUDA model over NCCL (and the two-GPU case,
#     which exits 77 with one GPU);
#  4. the ProcessGroup contract suite on NCCL at world size 1 (larger world
#     sizes need that many GPUs and exit 77);
#  5. blip_train --device cuda on the real data: 10 epochs under collie-run,
#     one rank per GPU, its test accuracy and samples/s;
#  6. nccl_overhead three times (raw ncclAllReduce against collie's, eager and
#     replayed from a CUDA graph, and the host cost of each CUDA call on the
#     path), and torch's own dist.all_reduce over NCCL beside it.
# Budget: about 4 minutes on an H200.
#
#   bash tools/gpu/check.sh [STAGE_DIR] [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
stage=$(cd "${1:-gpu-stage}" && pwd) || { echo "check: no stage folder (run tools/gpu/stage.sh here first)" >&2; exit 2; }
out=${2:-${OUT:-gpu-results}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=$stage/bin
py=${PYTHON:-python3}
start=$(date +%s)

site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" 2>/dev/null || true)
libs=""
for d in "$site"/nvidia/*/lib "$site"/nvidia/cu*/lib; do [[ -d $d ]] && libs="$libs:$d"; done
export LD_LIBRARY_PATH="${libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$bin/test_gpu_nccl" | grep -E "cuda|nccl|not found"
} 2>&1 | tee "$out/machine.txt"

summary=()
verdict_of() {  # exit code -> word
  case $1 in 0) echo passed ;; 77) echo skipped ;; 124) echo "TIMED OUT" ;; *) echo "FAILED ($1)" ;; esac
}
overall=0
step() {  # step <name> <limit s> <log> <command...>: runs it, records the verdict
  local name=$1 limit=$2 log=$3
  shift 3
  echo "== $name"
  timeout "$limit" "$@" >"$out/$log" 2>&1
  local rc=$?
  tail -6 "$out/$log"
  summary+=("| $name | $(verdict_of $rc) |")
  if (( rc != 0 && rc != 77 )); then overall=1; fi
  return $rc
}

annotate() {  # adds a detail to the last step's row
  summary[-1]="${summary[-1]} $(echo "$*" | tr '|' '/') |"
}

step "test_gpu_nccl" 240 test_gpu_nccl.log "$bin/test_gpu_nccl"
annotate "$(grep -m1 -E "test cases|All tests passed" "$out/test_gpu_nccl.log")"

if command -v compute-sanitizer >/dev/null; then
  step "test_gpu_nn (compute-sanitizer memcheck)" 240 test_gpu_nn.log \
    compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/test_gpu_nn"
  annotate "$(grep -m1 -E "ERROR SUMMARY" "$out/test_gpu_nn.log")"
else
  step "test_gpu_nn (no compute-sanitizer)" 120 test_gpu_nn.log "$bin/test_gpu_nn"
fi
step "test_gpu_ddp" 180 test_gpu_ddp.log "$bin/test_gpu_ddp"
step "test_gpu_ddp [two_gpus]" 120 test_gpu_ddp_two.log "$bin/test_gpu_ddp" "[two_gpus]"

# The contract suite at each world size the machine can hold, and the fault
# cases (which need 3 ranks, so 3 GPUs).
for n in 1 2 3 4 5 6 7 8; do
  step "contract nccl: world size $n" 300 "contract_$n.log" env COLLIE_CONTRACT_BACKEND=nccl \
    "$bin/test_contract_nccl" -w NoTests "every op x dtype x reduce op at world size $n"
  (( $? == 77 )) && break
done

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
(( ngpu >= 1 )) || ngpu=1
step "blip_train --device cuda, $ngpu rank(s), 10 epochs, Fashion-MNIST" 300 blip_train.log \
  "$bin/collie-run" --standalone --nproc-per-node "$ngpu" "$bin/blip_train" --device cuda \
  --data-dir "$stage/data" --epochs 10 --print-freq 1000 --output-dir "$out/blip_train"
acc=$(grep -m1 -oE "final test accuracy[^,]*" "$out/blip_train.log" || echo "no accuracy printed")
rate=$(grep -ohE '"samples_per_s": [0-9.e+]+' "$out"/blip_train/log.txt 2>/dev/null | tail -1)
annotate "$acc; $rate"

for i in 1 2 3; do
  step "nccl_overhead run $i" 200 "nccl_overhead_$i.txt" "$bin/nccl_overhead" -b 4 -e 268435456 \
    -f 4 -n 100 -w 20
done
step "torch dist.all_reduce over NCCL" 200 torch_all_reduce.txt "$py" "$bin/torch_all_reduce.py"

# Medians of the three nccl_overhead runs, per size.
"$py" - "$out" <<'PY' | tee "$out/nccl_overhead_median.md"
import statistics, sys, pathlib
out = pathlib.Path(sys.argv[1])
runs = []
for i in (1, 2, 3):
    f = out / f"nccl_overhead_{i}.txt"
    rows = {}
    for line in f.read_text().splitlines() if f.exists() else []:
        parts = line.split()
        if len(parts) == 10 and parts[0].isdigit():
            rows[int(parts[0])] = parts
    runs.append(rows)
torch_rows = {}
t = out / "torch_all_reduce.txt"
for line in t.read_text().splitlines() if t.exists() else []:
    parts = line.split()
    if parts and parts[0].isdigit():
        torch_rows[int(parts[0])] = float(parts[1])
sizes = sorted(set().union(*[r.keys() for r in runs]))
print("| bytes | nccl host us | collie host us | extra host us | nccl graph us | collie graph us | graph overhead | torch us |")
print("|---|---|---|---|---|---|---|---|")
def med(size, col):
    vals = [float(r[size][col].rstrip('%')) for r in runs if size in r]
    return statistics.median(vals) if vals else float("nan")
for s in sizes:
    print(f"| {s} | {med(s, 4):.2f} | {med(s, 5):.2f} | {med(s, 6):.2f} | {med(s, 7):.2f} | "
          f"{med(s, 8):.2f} | {med(s, 9):.1f}% | {torch_rows.get(s, float('nan')):.2f} |")
PY
grep -A12 "host cost of the CUDA calls" "$out/nccl_overhead_1.txt" | tee "$out/call_costs.txt"

{
  echo "| step | result | detail |"
  echo "|---|---|---|"
  # rows without a detail get an empty cell
  for row in "${summary[@]}"; do
    [[ $(tr -cd '|' <<<"$row" | wc -c) -lt 4 ]] && row="$row |"
    echo "$row"
  done
  echo
  echo "total $(( $(date +%s) - start ))s"
} | tee "$out/summary.md"
exit $overall
