#!/usr/bin/env python3
"""all_to_all and a send/recv ping-pong: collie against Open MPI, side by side.

Runs, in one go and ROUNDS times (each round runs every configuration once,
so a burst of load on this shared machine hits them all alike):

  collie-bench --nproc N --transport shm|tcp -C all_to_all|sendrecv --blocking
  mpirun --mca btl vader,self|tcp,self -np N mpi_exchange alltoall|pingpong

and prints, per size, the time per call in us (the ping-pong's is one way,
half a round trip), median (min-max) over the rounds, and the speed-up of
collie over Open MPI on the same transport class (collie shm against Open
MPI shm (vader), TCP against TCP): Open MPI's time / collie's, above 1
collie is faster. The ping-pong runs between ranks 0 and 1, at N = 2 only.

    bench/compare/exchange_compare.py --build build --rounds 5 \\
        --out out/exchange.md --json out/exchange.json --plot out/exchange

--out writes the tables (Markdown), --json the records (bench_results.py's
schema; with --out and no --json, next to it as .json), --plot the SVGs
(<collective>_N<n>.svg). merge_results.py and plot_results.py redraw both
from the JSON.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_results  # noqa: E402
import merge_results  # noqa: E402
import plot_results  # noqa: E402
from bench_stats import parse_bytes  # noqa: E402

TRANSPORTS = ("shm", "tcp")
MPI_BTL = {"shm": "vader", "tcp": "tcp"}


def collie(args: argparse.Namespace, transport: str, op: str, n: int, hi: int,
           iters: int) -> tuple:
    with tempfile.TemporaryDirectory(prefix="exchange_compare_") as tmp:
        cmd = [f"{args.build}/bin/collie-bench", "--nproc", str(n), "--transport", transport,
               "-C", "all_to_all" if op == "all_to_all" else "sendrecv",
               "-b", str(args.min), "-e", str(hi), "-f", str(args.factor), "-n", str(iters),
               "-w", str(args.warmup), "-c", "0", "--blocking", "--json", f"{tmp}/out.json"]
        bench_results.run_command(cmd, args.timeout)
        return bench_results.collie_bench_rows(f"{tmp}/out.json"), cmd


def mpi(args: argparse.Namespace, transport: str, op: str, n: int, hi: int, iters: int) -> tuple:
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl",
           f"{MPI_BTL[transport]},self", "-np", str(n), f"{args.build}/bin/mpi_exchange",
           "alltoall" if op == "all_to_all" else "pingpong", str(args.min), str(hi),
           str(args.factor), str(iters), str(args.warmup)]
    return bench_results.parse_rows(bench_results.run_command(cmd, args.timeout)), cmd


def configurations(args: argparse.Namespace):
    """(op, N, largest size, calls per size) in the order of a round."""
    for n in args.worlds:
        for op in args.ops:
            if op == "pingpong" and n != 2:
                continue
            if op == "all_to_all":
                yield op, n, args.max, args.iters
            else:
                yield op, n, min(args.max, 4 << 20), args.pingpong_iters


def measure(args: argparse.Namespace) -> list:
    machine = bench_results.machine_info()
    records: dict = {}
    for r in range(args.rounds):
        print(f"round {r + 1} of {args.rounds}", file=sys.stderr, flush=True)
        for op, n, hi, iters in configurations(args):
            for transport in TRANSPORTS:
                for impl, runner in (("collie", collie), ("openmpi", mpi)):
                    rows, cmd = runner(args, transport, op, n, hi, iters)
                    bench_results.record_rows(records, rows, impl, transport, op, n, iters,
                                              args.warmup, cmd)
    bench_results.finish_machine(machine)
    for rec in records.values():
        rec.machine = machine
    return list(records.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--build", default="build")
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min", type=parse_bytes, default=4)
    ap.add_argument("--max", type=parse_bytes, default=64 << 20)
    ap.add_argument("--factor", type=int, default=16)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--pingpong-iters", type=int, default=1000)
    ap.add_argument("--ops", nargs="+", default=["all_to_all", "pingpong"],
                    choices=["all_to_all", "pingpong"])
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--out", metavar="MD", help="also write the tables here")
    ap.add_argument("--json", metavar="FILE", help="write the records here")
    ap.add_argument("--plot", metavar="DIR", help="draw the SVGs here")
    args = ap.parse_args()
    if not os.access(f"{args.build}/bin/mpi_exchange", os.X_OK):
        sys.exit(f"{args.build}/bin/mpi_exchange is missing (needs libopenmpi-dev)")

    records = measure(args)
    json_path = args.json or (os.path.splitext(args.out)[0] + ".json" if args.out else None)
    if json_path:
        bench_results.save(json_path, records)
    text = merge_results.render(records)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.plot:
        for path in plot_results.plot(records, args.plot):
            print(f"plot: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
