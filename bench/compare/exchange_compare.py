#!/usr/bin/env python3
"""all_to_all and a send/recv ping-pong: collie against Open MPI, side by side.

Runs, in one go and ROUNDS times (each round runs every configuration once,
so a burst of load on this shared machine hits them all alike):

  collie-bench --nproc N --transport shm|tcp -C all_to_all|sendrecv --blocking
  mpirun --mca btl vader,self|tcp,self -np N mpi_exchange alltoall|pingpong

and prints the median time per call (us; the ping-pong's is one way, half a
round trip), its min-max over the rounds, and collie's time over Open MPI's
on the same transport class (shared memory vs vader, TCP vs TCP): below 1
means collie is faster.

    bench/compare/exchange_compare.py --build build --rounds 5 --out out/exchange.md
"""
import argparse
import os
import re
import statistics
import subprocess
import sys


def run(cmd, timeout):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p.stdout


def collie(args, transport, op, n, lo, hi):
    out = run([f"{args.build}/bin/collie-bench", "--nproc", str(n), "--transport", transport,
               "-C", op, "-b", str(lo), "-e", str(hi), "-f", str(args.factor),
               "-n", str(args.iters), "-w", str(args.warmup), "-c", "0", "--blocking"],
              args.timeout)
    times = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[0].isdigit():
            times[int(cells[0])] = float(cells[5])
    return times


def mpi(args, btl, op, n, lo, hi):
    out = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", f"{btl},self",
               "-np", str(n), f"{args.build}/bin/mpi_exchange", op, str(lo), str(hi),
               str(args.factor), str(args.iters), str(args.warmup)], args.timeout)
    times = {}
    for line in out.splitlines():
        m = re.match(r"^(\d+) ([\d.]+) ", line)
        if m:
            times[int(m.group(1))] = float(m.group(2))
    return times


def human(b):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= size and b % size == 0:
            return f"{b // size} {unit}"
    return f"{b} B"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min", type=int, default=4)
    ap.add_argument("--max", type=int, default=64 << 20)
    ap.add_argument("--factor", type=int, default=16)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--pingpong-iters", type=int, default=1000)
    ap.add_argument("--ops", nargs="+", default=["all_to_all", "pingpong"],
                    choices=["all_to_all", "pingpong"])
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--out", help="also write the tables here")
    args = ap.parse_args()
    if not os.access(f"{args.build}/bin/mpi_exchange", os.X_OK):
        sys.exit(f"{args.build}/bin/mpi_exchange is missing (needs libopenmpi-dev)")

    # (op, N, size) -> config -> [times]
    samples = {}
    configs = [("collie shm", "shm"), ("Open MPI vader", "vader"),
               ("collie TCP", "tcp"), ("Open MPI TCP", "tcp")]
    for r in range(args.rounds):
        print(f"round {r + 1} of {args.rounds}", file=sys.stderr)
        for n in args.worlds:
            for op in args.ops:
                # The ping-pong runs between ranks 0 and 1 only: N = 2.
                if op == "pingpong" and n != 2:
                    continue
                lo, hi = args.min, args.max if op == "all_to_all" else min(args.max, 4 << 20)
                saved = args.iters
                if op == "pingpong":
                    args.iters = args.pingpong_iters
                for name, transport in configs:
                    if name.startswith("collie"):
                        t = collie(args, transport, "all_to_all" if op == "all_to_all"
                                   else "sendrecv", n, lo, hi)
                    else:
                        t = mpi(args, transport, "alltoall" if op == "all_to_all"
                                else "pingpong", n, lo, hi)
                    for size, us in t.items():
                        samples.setdefault((op, n, size), {}).setdefault(name, []).append(us)
                args.iters = saved

    lines = [f"Medians of {args.rounds} rounds, time per call in us (min-max); "
             "ratio = collie / Open MPI on the same transport class (< 1: collie faster).", ""]
    for op in ("all_to_all", "pingpong"):
        for n in args.worlds:
            keys = sorted(k for k in samples if k[0] == op and k[1] == n)
            if not keys:
                continue
            title = ("all_to_all (each rank's whole buffer, equal parts)" if op == "all_to_all"
                     else "send/recv ping-pong, one way")
            lines += [f"### {title}, N = {n}", "",
                      "| size | collie shm | Open MPI vader | shm ratio | collie TCP | "
                      "Open MPI TCP | TCP ratio |", "| --- | --- | --- | --- | --- | --- | --- |"]
            for _, _, size in keys:
                row = samples[(op, n, size)]
                med = {c: statistics.median(v) for c, v in row.items()}
                cell = lambda c: (f"{med[c]:.1f} ({min(row[c]):.1f}-{max(row[c]):.1f})"
                                  if c in med else "-")
                ratio = lambda a, b: f"{med[a] / med[b]:.2f}" if a in med and b in med else "-"
                lines.append(f"| {human(size)} | {cell('collie shm')} | {cell('Open MPI vader')} | "
                             f"{ratio('collie shm', 'Open MPI vader')} | {cell('collie TCP')} | "
                             f"{cell('Open MPI TCP')} | {ratio('collie TCP', 'Open MPI TCP')} |")
            lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
