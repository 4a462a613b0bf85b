#!/usr/bin/env python3
"""all_reduce and the other collectives: collie and its peers side by side.

Float32 (sum where it reduces), sizes MIN..MAX bytes (x FACTOR), every rank
on this host, for each world size and each of --collectives (default
all_reduce; "all": all_reduce broadcast reduce all_gather reduce_scatter
gather scatter all_to_all all_to_all_uneven pingpong stream), each peer of
--peers that has it:

    collie, collie_tcp   collie-bench over shared memory (its default on one
                         host) and over TCP loopback
    mpi, mpi_sm          Open MPI (mpi_collectives) over TCP (--mca btl
                         tcp,self) and shared memory (vader,self), its default
                         coll components
    mpi_tuned, mpi_han,  Open MPI over vader with coll tuned, han or sm in
    mpi_collsm           front (this Debian's 4.1 has no xhc or acoll)
    gloo                 Gloo's own algorithms over TCP (gloo_collectives: ring
                         all_reduce, halving-doubling reduce_scatter)
    torch, torch211,     torch.distributed with gloo (torch_collectives.py) under
    torch215             --torch-python, --torch211-python, --torch215-python
    deepspeed            DeepSpeed's CPU shm all_reduce
                         (deepspeed_collectives.py, --deepspeed-python)

all_to_all_uneven is all_to_all_single with a router's fixed skewed split
sizes (peer_sweep.h's router_splits, the same in every program); pingpong
and stream run between ranks 0 and 1, at N = 2 only. Every call is
blocking: each peer waits for a call before issuing the next, so collie runs
--blocking. A peer whose program is missing is skipped with a note. With a
large --iters, --iter-bytes caps each size's calls at that many bytes' worth,
so that the small sizes get many calls and the large ones few.

--reps R runs the whole set R times, each rep running every configuration
once (so a burst of load on a shared machine falls on all alike), and
measures T (one loopback TCP stream, bench/compare/tcp_stream.cc) and the
memcpy rate at the start of each rep. It writes, into OUT:

    results.json            the records (bench_results.py's schema), kept up to
                            date after each program run
    results.md              one table per collective and world size
                            (merge_results.py) with collie's speed-up over the
                            fastest peer, also printed
    <collective>_N<n>.svg   time (and for all_reduce bus bandwidth) per size

    bench/compare/allreduce_compare.py --build build --out out/compare --reps 5
    bench/compare/allreduce_compare.py --build build --out /tmp/quick \\
        --worlds 2 --max 64K --factor 16 --iters 5 --reps 1
    bench/compare/allreduce_compare.py --build build --out out/all --collectives all \\
        --peers collie mpi_sm mpi_tuned gloo torch211 torch215 deepspeed \\
        --iters 20000 --iter-bytes 1G --reps 5

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
    "mpi_tuned": ("openmpi", "shm-tuned"),
    "mpi_han": ("openmpi", "shm-han"),
    "mpi_collsm": ("openmpi", "shm-collsm"),
    "torch": ("torch-gloo", "tcp"),
    "torch211": ("torch-gloo-2.11", "tcp"),
    "torch215": ("torch-gloo-2.15", "tcp"),
    "deepspeed": ("deepspeed", "shm"),
}
DEFAULT_PEERS = ["collie", "collie_tcp", "gloo", "mpi", "mpi_sm", "torch"]

# Every collective the sweep knows, in the order it runs them. pingpong and
# stream run between ranks 0 and 1, at N = 2 only.
COLLECTIVES = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "gather",
               "scatter", "all_to_all", "all_to_all_uneven", "pingpong", "stream"]
P2P = ("pingpong", "stream")

# What a peer lacks: DeepSpeed's shm op is an all_reduce only.
UNSUPPORTED = {"deepspeed": set(COLLECTIVES) - {"all_reduce"}}

# Open MPI over shared memory (btl vader) with one coll component in front:
# "--mca coll" lists the components allowed (the others for what the named
# one lacks), the priority puts it first.
MPI_COLL = {
    "shm": [],
    "tcp": [],
    "shm-tuned": ["--mca", "coll", "tuned,libnbc,basic,self"],
    "shm-han": ["--mca", "coll", "han,tuned,libnbc,basic,self", "--mca", "coll_han_priority",
                "100"],
    "shm-collsm": ["--mca", "coll", "sm,tuned,libnbc,basic,self", "--mca", "coll_sm_priority",
                   "100"],
}


def note(text: str) -> None:
    print(f"allreduce_compare: {text}", file=sys.stderr, flush=True)


def sweep(args: argparse.Namespace) -> list:
    """MIN MAX FACTOR ITERS WARMUP ITER_BYTES, as the peers' programs take them."""
    return [str(args.min), str(args.max), f"{args.factor:g}", str(args.iters), str(args.warmup),
            str(args.iter_bytes)]


def run_collie(args: argparse.Namespace, n: int, transport: str, collectives: list) -> tuple:
    """collie-bench once per collective (it times one a run)."""
    rows, first = {}, None
    for c in collectives:
        with tempfile.TemporaryDirectory(prefix="allreduce_compare_") as tmp:
            cmd = [f"{args.bin}/collie-bench", "--nproc", str(n), "--transport", transport,
                   "-C", "sendrecv" if c == "pingpong" else c,
                   "-b", str(args.min), "-e", str(args.max), "-f", f"{args.factor:g}",
                   "-n", str(args.iters), "-w", str(args.warmup),
                   "--iter-bytes", str(args.iter_bytes), "--algo", args.algo,
                   "--blocking", "-c", "0", "--json", f"{tmp}/collie.json"]
            bench_results.run_command(cmd, args.timeout)
            rows[c] = bench_results.collie_bench_rows(f"{tmp}/collie.json")
            first = first or cmd
    return rows, first


def run_ranks(args: argparse.Namespace, n: int, argv_of_rank, env=None) -> tuple:
    """Starts ranks 1..n-1 in the background and rank 0 in the foreground;
    rank 0's rows ({collective: {bytes: time_us}}) and command."""
    others = [subprocess.Popen(argv_of_rank(r), stdout=subprocess.DEVNULL, env=env)
              for r in range(1, n)]
    try:
        out = bench_results.run_command(argv_of_rank(0), args.timeout, env=env)
        for p in others:
            if p.wait(timeout=args.timeout) != 0:
                raise RuntimeError(f"{shlex.join(p.args)} exited {p.returncode}")
    finally:
        for p in others:
            if p.poll() is None:
                p.kill()
                p.wait()
    return bench_results.parse_collective_rows(out), argv_of_rank(0)


def run_gloo(args: argparse.Namespace, n: int, transport: str, collectives: list) -> tuple:
    """Gloo's ring all_reduce (what torch runs) and its other collectives; its
    reduce_scatter, which Gloo has only as halving-doubling, in a run of its own."""
    rows, first = {}, None
    for algo, these in (("ring", [c for c in collectives if c != "reduce_scatter"]),
                        ("hd", [c for c in collectives if c == "reduce_scatter"])):
        if not these:
            continue
        with tempfile.TemporaryDirectory(prefix="gloo_store_") as store:
            got, cmd = run_ranks(args, n, lambda r: [
                f"{args.bin}/gloo_collectives", str(r), str(n), store, "127.0.0.1", algo,
                ",".join(these), *sweep(args)])
        rows.update(got)
        first = first or cmd
    return rows, first


def python_of(args: argparse.Namespace, impl: str) -> str:
    return {"torch-gloo": args.torch_python, "torch-gloo-2.11": args.torch211_python,
            "torch-gloo-2.15": args.torch215_python, "deepspeed": args.deepspeed_python}[impl]


def python_runner(script: str, impl: str):
    def run(args: argparse.Namespace, n: int, transport: str, collectives: list) -> tuple:
        with tempfile.TemporaryDirectory(prefix="torch_init_") as tmp:
            return run_ranks(args, n, lambda r: [python_of(args, impl), f"{HERE}/{script}",
                                                 str(r), str(n), f"{tmp}/init",
                                                 ",".join(collectives), *sweep(args)])
    return run


def run_mpi(args: argparse.Namespace, n: int, transport: str, collectives: list) -> tuple:
    btl = "tcp" if transport == "tcp" else "vader"
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", f"{btl},self",
           *MPI_COLL[transport], "-np", str(n), f"{args.bin}/mpi_collectives",
           ",".join(collectives), *sweep(args)]
    return bench_results.parse_collective_rows(bench_results.run_command(cmd, args.timeout)), cmd


RUNNERS = {"collie": run_collie, "gloo": run_gloo, "openmpi": run_mpi,
           "torch-gloo": python_runner("torch_collectives.py", "torch-gloo"),
           "torch-gloo-2.11": python_runner("torch_collectives.py", "torch-gloo-2.11"),
           "torch-gloo-2.15": python_runner("torch_collectives.py", "torch-gloo-2.15"),
           "deepspeed": python_runner("deepspeed_collectives.py", "deepspeed")}


def missing(args: argparse.Namespace, peer: str) -> str:
    """Why the peer cannot run here, or ""."""
    impl = PEERS[peer][0]
    need = {"collie": "collie-bench", "gloo": "gloo_collectives", "openmpi": "mpi_collectives"}
    python = python_of(args, impl) if impl.startswith(("torch", "deepspeed")) else ""
    why = bench_results.why_missing(args.bin, need.get(impl, ""), mpirun=impl == "openmpi",
                                    torch_python=python)
    if not why and impl == "deepspeed" and subprocess.run(
            [python, "-c", "import deepspeed"], capture_output=True).returncode != 0:
        why = f"no deepspeed in {python}"
    return why


def collectives_of(args: argparse.Namespace, peer: str, n: int) -> list:
    """The requested collectives that this peer runs at world size n."""
    impl = PEERS[peer][0]
    return [c for c in args.collectives
            if c not in UNSUPPORTED.get(impl, ()) and (n == 2 or c not in P2P)]


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
                collectives = collectives_of(args, peer, n)
                if not collectives:
                    continue
                note(f"rep {rep + 1} of {args.reps}, N={n} {peer}: {' '.join(collectives)}")
                impl, transport = PEERS[peer]
                try:
                    rows, cmd = RUNNERS[impl](args, n, transport, collectives)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    note(f"{peer} failed at N={n}, left out of this rep: {e}")
                    continue
                for c in collectives:
                    if not rows.get(c):
                        note(f"{peer} printed no {c} rows at N={n}")
                    bench_results.record_rows(records, rows.get(c, {}), impl, transport, c, n,
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
    ap.add_argument("--iter-bytes", type=parse_bytes, default=0,
                    help="0, or at most this many bytes' worth of timed calls per size (at "
                    "least 1): with a large --iters, many calls at the small sizes, few at "
                    "the large")
    ap.add_argument("--collectives", nargs="+", default=["all_reduce"],
                    choices=COLLECTIVES + ["all"], help="what to time ('all': every one)")
    ap.add_argument("--peers", nargs="+", default=DEFAULT_PEERS, choices=list(PEERS))
    ap.add_argument("--ratios", choices=["auto", "each", "fastest"], default="auto",
                    help="speed-up columns: collie over each peer, or only over the fastest "
                    "(auto: each up to 6 peers)")
    ap.add_argument("--torch-python", default="/usr/bin/python3",
                    help="the Python with torch for the torch peer")
    venvs = os.path.expanduser("~/.cache/collie")
    ap.add_argument("--torch211-python", default=f"{venvs}/venv-torch-2.11.0/bin/python",
                    help="the Python of the torch211 peer")
    ap.add_argument("--torch215-python", default=f"{venvs}/venv-torch-2.15.0/bin/python",
                    help="the Python of the torch215 peer")
    ap.add_argument("--deepspeed-python", default=f"{venvs}/venv-frameworks-2.11.0/bin/python",
                    help="the Python with deepspeed for the deepspeed peer")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per program run")
    args = ap.parse_args()
    if "all" in args.collectives:
        args.collectives = COLLECTIVES
    args.bin = os.path.abspath(os.path.join(args.build, "bin"))
    records = measure(args)
    each_peer = args.ratios == "each" or (args.ratios == "auto" and len(args.peers) <= 6)
    text = merge_results.render(records, [merge_results.fastest_peer(records)], each_peer)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    for path in plot_results.plot(records, args.out):
        note(f"plot: {path}")


if __name__ == "__main__":
    main()
