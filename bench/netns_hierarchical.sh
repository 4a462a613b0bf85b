#!/usr/bin/env bash
# Hierarchical against flat collectives between two "hosts": two network
# namespaces joined by a veth pair, 2 ranks in each (4 ranks, by default
# placed host by host: ranks 0, 1 on host a, 2, 3 on host b). Each round
# runs collie-bench once with the hierarchical algorithms (the default across hosts) and once
# with COLLIE_HIERARCHICAL=0 (the flat ones: the ring / direct exchange
# over shm and TCP channels); after RUNS rounds it prints, per size, the
# median (min-max) time of each and their ratio. Needs root (ip netns).
#
#   bench/netns_hierarchical.sh build                 # all_reduce, 5 rounds
#   RUNS=7 COLLECTIVE=broadcast bench/netns_hierarchical.sh build
#
# Environment: RUNS (5), COLLECTIVE (all_reduce), MIN (8), MAX (16M),
# FACTOR (8), ITERS (20), WARMUP (5), SUBNET (10.231.14), EXTRA (more
# collie-bench flags, e.g. --blocking), PLACEMENT (block: ranks 0, 1 on host
# a; interleaved: ranks 0, 2 on host a, so that every link of the flat ring
# crosses hosts).
set -euo pipefail

BIN=$(cd "${1:?usage: netns_hierarchical.sh BUILD_DIR}" && pwd)/bin/collie-bench
RUNS=${RUNS:-5}
COLLECTIVE=${COLLECTIVE:-all_reduce}
MIN=${MIN:-8}
MAX=${MAX:-16M}
FACTOR=${FACTOR:-8}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
SUBNET=${SUBNET:-10.231.14}
EXTRA=${EXTRA:-}
PLACEMENT=${PLACEMENT:-block}
[ -x "$BIN" ] || { echo "no $BIN: build collie-bench first" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "needs root (ip netns)" >&2; exit 1; }

A=chb$$a B=chb$$b
OUT=$(mktemp -d)
cleanup() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
  [ -n "${KEEP:-}" ] && echo "kept $OUT" >&2 || rm -rf "$OUT"
}
trap cleanup EXIT
ip netns add "$A"
ip netns add "$B"
ip link add "v$A" type veth peer name "v$B"
ip link set "v$A" netns "$A"
ip link set "v$B" netns "$B"
ip -n "$A" addr add "$SUBNET.1/24" dev "v$A"
ip -n "$B" addr add "$SUBNET.2/24" dev "v$B"
for ns in "$A" "$B"; do
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "v$ns" up
done

# One collie-bench job; rank 0's table goes to $1.
run_job() {
  local out=$1 port=$2 hier=$3 pids=()
  for rank in 0 1 2 3; do
    local host=$((rank / 2)) local_rank=$((rank % 2))
    if [ "$PLACEMENT" = interleaved ]; then
      host=$((rank % 2)) local_rank=$((rank / 2))
    fi
    local ns=$A
    [ "$host" = 1 ] && ns=$B
    env -u COLLIE_HOST_ID RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$local_rank LOCAL_WORLD_SIZE=2 \
      MASTER_ADDR="$SUBNET.1" MASTER_PORT=$port COLLIE_HIERARCHICAL=$hier \
      ip netns exec "$ns" "$BIN" -C "$COLLECTIVE" -b "$MIN" -e "$MAX" -f "$FACTOR" \
      -n "$ITERS" -w "$WARMUP" $EXTRA >"$out.$rank" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ $rc != 0 ]; then
    echo "collie-bench failed (COLLIE_HIERARCHICAL=$hier):" >&2
    cat "$out".* >&2
    exit 1
  fi
  mv "$out.0" "$out"
}

for i in $(seq 1 "$RUNS"); do
  run_job "$OUT/hier.$i" $((29500 + 2 * i)) 1
  run_job "$OUT/flat.$i" $((29501 + 2 * i)) 0
done

/usr/bin/python3 - "$OUT" "$RUNS" "$COLLECTIVE" "$PLACEMENT" <<'EOF'
import statistics, sys
out, runs, collective, placement = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def table(path):
    rows = {}
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit():
            rows[int(f[0])] = float(f[5])  # size (B) -> time (us)
    return rows
times = {m: [table(f"{out}/{m}.{i}") for i in range(1, runs + 1)] for m in ("hier", "flat")}
print(f"# {collective}, 2 hosts (netns) x 2 ranks ({placement} placement), "
      f"medians (min-max) of {runs} runs, us")
print("| size (B) | hierarchical | flat | flat / hierarchical |")
print("|---:|---:|---:|---:|")
for size in sorted(times["hier"][0]):
    h = [t[size] for t in times["hier"]]
    f = [t[size] for t in times["flat"]]
    mh, mf = statistics.median(h), statistics.median(f)
    print(f"| {size} | {mh:.1f} ({min(h):.1f}-{max(h):.1f}) | {mf:.1f} ({min(f):.1f}-{max(f):.1f})"
          f" | {mf / mh:.2f} |")
EOF
