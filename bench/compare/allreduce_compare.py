#!/usr/bin/env python3
"""all_reduce: collie and its peers side by side on this machine.

Float32 sum, sizes MIN..MAX bytes (x FACTOR), every rank on this host, for
each world size: collie over shared memory (its default on one host) and
over TCP loopback, Open MPI's MPI_Allreduce over TCP (--mca btl tcp,self) and
over shared memory (vader,self), Gloo's ring all_reduce and torch.distributed
with gloo (torch_collectives.py under --torch-python). Every call is blocking: each
peer waits for a call before issuing the next, so collie runs --blocking.
A peer whose program is missing is skipped with a note.

--reps R runs the whole set R times, each rep running every configuration
once (so a burst of load on a shared machine falls on all alike), and
measures T (one loopback TCP stream, bench/compare/tcp_stream.cc) and the
memcpy rate at the start of each rep. It writes, into OUT:

    results.json        the records (bench_results.py's schema), kept up to date
                        after each program run
    results.md          one table per world size (merge_results.py), also printed
    all_reduce_N<n>.svg time and bus bandwidth per size (plot_results.py)

    bench/compare/allreduce_compare.py --build build --out out/compare --reps 5
    bench/compare/allreduce_compare.py --build build --out /tmp/quick \\
        --worlds 2 --max 64K --factor 16 --iters 5 --reps 1

run_compare.sh is the same with its settings in environment variables.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_results  # noqa: E402
import merge_results  # noqa: E402
import plot_results  # noqa: E402
from bench_stats import parse_bytes  # noqa: E402

# peer -> (impl, transport) in the records
PEERS = {
    "collie": ("collie", "auto"),
    "collie_tcp": ("collie", "tcp"),
    "gloo": ("gloo", "tcp"),
    "mpi": ("openmpi", "tcp"),
    "mpi_sm": ("openmpi", "shm"),
    "torch": ("torch-gloo", "tcp"),
}


def note(text: str) -> None:
    print(f"allreduce_compare: {text}", file=sys.stderr, flush=True)


def sweep(args: argparse.Namespace) -> list:
    """MIN MAX FACTOR ITERS WARMUP, as the peers' programs take them."""
    return [str(args.min), str(args.max), f"{args.factor:g}", str(args.iters), str(args.warmup)]


def run_collie(args: argparse.Namespace, n: int, transport: str) -> tuple:
    with tempfile.TemporaryDirectory(prefix="allreduce_compare_") as tmp:
        cmd = [f"{args.bin}/collie-bench", "--nproc", str(n), "--transport", transport,
               "-b", str(args.min), "-e", str(args.max), "-f", f"{args.factor:g}",
               "-n", str(args.iters), "-w", str(args.warmup), "--algo", args.algo,
               "--blocking", "-c", "0", "--json", f"{tmp}/collie.json"]
        bench_results.run_command(cmd, args.timeout)
        return bench_results.collie_bench_rows(f"{tmp}/collie.json"), cmd


def run_ranks(args: argparse.Namespace, n: int, argv_of_rank) -> tuple:
    """Starts ranks 1..n-1 in the background and rank 0 in the foreground;
    rank 0's rows and command."""
    others = [subprocess.Popen(argv_of_rank(r), stdout=subprocess.DEVNULL)
              for r in range(1, n)]
    try:
        out = bench_results.run_command(argv_of_rank(0), args.timeout)
        for p in others:
            if p.wait(timeout=args.timeout) != 0:
                raise RuntimeError(f"{shlex.join(p.args)} exited {p.returncode}")
    finally:
        for p in others:
            if p.poll() is None:
                p.kill()
                p.wait()
    return bench_results.parse_rows(out), argv_of_rank(0)


def run_gloo(args: argparse.Namespace, n: int, transport: str) -> tuple:
    with tempfile.TemporaryDirectory(prefix="gloo_store_") as store:
        return run_ranks(args, n, lambda r: [f"{args.bin}/gloo_collectives", str(r), str(n), store,
                                             "127.0.0.1", "ring", "all_reduce", *sweep(args),
                                             "0"])


def run_torch(args: argparse.Namespace, n: int, transport: str) -> tuple:
    with tempfile.TemporaryDirectory(prefix="torch_init_") as tmp:
        return run_ranks(args, n, lambda r: [args.torch_python, f"{HERE}/torch_collectives.py",
                                             str(r), str(n), f"{tmp}/init", "all_reduce",
                                             *sweep(args), "0"])


def run_mpi(args: argparse.Namespace, n: int, transport: str) -> tuple:
    btl = {"tcp": "tcp", "shm": "vader"}[transport]
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", f"{btl},self",
           "-np", str(n), f"{args.bin}/mpi_collectives", "all_reduce", *sweep(args), "0"]
    return bench_results.parse_rows(bench_results.run_command(cmd, args.timeout)), cmd


RUNNERS = {"collie": run_collie, "gloo": run_gloo, "openmpi": run_mpi, "torch-gloo": run_torch}


def missing(args: argparse.Namespace, peer: str) -> str:
    """Why the peer cannot run here, or ""."""
    impl = PEERS[peer][0]
    need = {"collie": "collie-bench", "gloo": "gloo_collectives", "openmpi": "mpi_collectives"}
    return bench_results.why_missing(
        args.bin, need.get(impl, ""), mpirun=impl == "openmpi",
        torch_python=args.torch_python if impl == "torch-gloo" else "")


def tcp_stream(args: argparse.Namespace, machine: dict) -> None:
    """Appends this rep's T and memcpy rate to the machine's lists."""
    if not os.access(f"{args.bin}/tcp_stream", os.X_OK):
        return
    out = bench_results.run_command([f"{args.bin}/tcp_stream"], args.timeout)
    values = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
    for key in ("tcp_stream_gbps", "memcpy_gbps"):
        if key in values:
            machine.setdefault(key, []).append(float(values[key]))
    note(out.strip().replace("\n", ", "))


def measure(args: argparse.Namespace) -> list:
    peers = []
    for peer in args.peers:
        why = missing(args, peer)
        if why:
            note(f"{why}; skipping {peer}")
        else:
            peers.append(peer)
    machine = bench_results.machine_info()
    records: dict = {}
    for rep in range(args.reps):
        tcp_stream(args, machine)
        for n in args.worlds:
            for peer in peers:
                note(f"rep {rep + 1} of {args.reps}, N={n} {peer}")
                impl, transport = PEERS[peer]
                rows, cmd = RUNNERS[impl](args, n, transport)
                bench_results.record_rows(records, rows, impl, transport, "all_reduce", n,
                                          args.iters, args.warmup, cmd)
                save(args, records, machine)  # so far: a failure later keeps it
    bench_results.finish_machine(machine)
    save(args, records, machine)
    return list(records.values())


def save(args: argparse.Namespace, records: dict, machine: dict) -> None:
    for r in records.values():
        r.machine = machine
    bench_results.save(os.path.join(args.out, "results.json"), records.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--build", default="build", help="the build directory (its bin/)")
    ap.add_argument("--out", required=True, help="the output directory")
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--min", type=parse_bytes, default=4, help="smallest size (4, 64K, 1M)")
    ap.add_argument("--max", type=parse_bytes, default=256 << 20, help="largest size")
    ap.add_argument("--factor", type=float, default=4, help="size step factor")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per size")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up calls per size")
    ap.add_argument("--algo", default="auto", help="collie-bench --algo")
    ap.add_argument("--reps", type=int, default=1, help="times the whole set is run")
    ap.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS))
    ap.add_argument("--torch-python", default="/usr/bin/python3",
                    help="the Python with torch for the torch peer")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per program run")
    args = ap.parse_args()
    args.bin = os.path.abspath(os.path.join(args.build, "bin"))
    records = measure(args)
    text = merge_results.render(records)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    for path in plot_results.plot(records, args.out):
        note(f"plot: {path}")


if __name__ == "__main__":
    main()
