#!/usr/bin/python3
"""torch.distributed.all_reduce over collie against gloo: same script, same processes.

    PYTHONPATH=build/python /usr/bin/python3 bench/compare/torch_backends.py \\
        [--worlds 2 4] [--runs 5] [--max-bytes 67108864]

For each world size, --runs separate jobs (fresh processes each). In a job
every rank has both groups, collie (the default group) and gloo
(new_group), and times each size on both, one after the other, so the two
see the same machine load. A time is the mean of one size's timed calls
(float32 sum, after warm-up), averaged over the ranks; the table shows, per
size, the median over the runs (and the min-max), and gloo's time over
collie's. It also measures what the adapter adds to collie's own C++ call
for a 4-byte all_reduce: the same loop through collie's ProcessGroup and
through the c10d interface (collie_torch._time_allreduce, GIL released,
process CPU time: the steadier figure on shared cores).

--ddp-runs N (default 0: skipped) adds torch's DistributedDataParallel on
Fashion-MNIST: samples/torch_ddp/train.py for one epoch of --ddp-steps steps
per rank, over collie and over gloo alternately, N times each per world size;
it reports the median training samples/s (all ranks together, evaluation
excluded) of each backend.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
TRAIN = os.path.join(os.path.dirname(HERE), "..", "..", "samples", "torch_ddp", "train.py")


def sizes(max_bytes):
    n = 4
    while n <= max_bytes:
        yield n
        n *= 4


def iterations(nbytes):
    return max(3, min(200, (8 << 20) // nbytes))


def worker(max_bytes):
    import torch
    import torch.distributed as dist

    import collie_torch

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("collie")
    gloo = dist.new_group(backend="gloo")
    groups = {"collie": None, "gloo": gloo}
    data = torch.ones(max_bytes // 4)
    for nbytes in sizes(max_bytes):
        t = data[:nbytes // 4]
        iters = iterations(nbytes)
        for name, group in groups.items():
            for _ in range(2):
                dist.all_reduce(t, group=group)
            dist.barrier(group=group)
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t, group=group)
            us = torch.tensor([(time.perf_counter() - start) * 1e6 / iters], dtype=torch.float64)
            dist.all_reduce(us, group=gloo)
            if rank == 0:
                print(f"allreduce {name} {nbytes} {us.item() / world:.2f}", flush=True)
    pg = dist.distributed_c10d._get_default_group()
    small = torch.ones(1)
    for path in ("collie", "adapter", "collie", "adapter"):
        wall, cpu = collie_torch._time_allreduce(pg, small, 2000, path)
        if rank == 0:
            print(f"overhead {path} {wall * 1e6:.3f} {cpu * 1e6:.3f}", flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world, argv):
    """Runs `world` ranks of `argv` with torch's env:// variables; rank 0's
    output lines."""
    env = dict(os.environ, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen(argv, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, text=True) for r in range(world)]
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit(f"a rank of {argv} failed (exit codes {[p.returncode for p in procs]})")
    return outs[0].splitlines()


def run_job(world, max_bytes):
    return run_ranks(world, [sys.executable, HERE, "--worker", "--max-bytes", str(max_bytes)])


def ddp_samples_per_s(world, backend, steps):
    with tempfile.TemporaryDirectory(prefix="torch_backends_ddp_") as out:
        run_ranks(world, [sys.executable, TRAIN, "--backend", backend, "--epochs", "1",
                          "--max-steps", str(steps), "--print-freq", "100000", "--output-dir",
                          out])
        with open(os.path.join(out, "log.txt")) as f:
            return json.loads(f.readline())["train_samples_per_s"]


def span(values):
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def human(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    p.add_argument("--ddp-runs", type=int, default=0)
    p.add_argument("--ddp-steps", type=int, default=200, help="training steps per rank")
    p.add_argument("--skip-all-reduce", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args.max_bytes)
    if not args.skip_all_reduce:
        all_reduce_tables(args)
    if args.ddp_runs > 0:
        ddp_table(args)


def ddp_table(args):
    print(f"\nDDP on Fashion-MNIST (samples/torch_ddp/train.py, {args.ddp_steps} steps of 64 per "
          f"rank): training samples/s, median (min-max) of {args.ddp_runs} runs\n")
    print("| ranks | collie | gloo | collie/gloo |\n| --- | --- | --- | --- |")
    for world in args.worlds:
        rates = {"collie": [], "gloo": []}
        for _ in range(args.ddp_runs):
            for backend in rates:
                rates[backend].append(ddp_samples_per_s(world, backend, args.ddp_steps))
        c, g = rates["collie"], rates["gloo"]
        print(f"| {world} | {span(c)} | {span(g)} | "
              f"{statistics.median(c) / statistics.median(g):.2f} |", flush=True)


def all_reduce_tables(args):
    print(f"torch.distributed.all_reduce (float32 sum), collie vs gloo: median (min-max) us "
          f"of {args.runs} runs")
    for world in args.worlds:
        times, overhead = {}, {"collie": [], "adapter": []}
        for _ in range(args.runs):
            for line in run_job(world, args.max_bytes):
                kind, *rest = line.split()
                if kind == "allreduce":
                    times.setdefault((int(rest[1]), rest[0]), []).append(float(rest[2]))
                elif kind == "overhead":
                    overhead[rest[0]].append(float(rest[2]))
        print(f"\nN = {world}\n\n| size | collie us | gloo us | gloo/collie time |\n| --- | --- | --- | --- |")
        for nbytes in sizes(args.max_bytes):
            c, g = times[(nbytes, "collie")], times[(nbytes, "gloo")]
            print(f"| {human(nbytes)} | {span(c)} | {span(g)} | "
                  f"{statistics.median(g) / statistics.median(c):.2f} |")
        added = [a - c for a, c in zip(overhead["adapter"], overhead["collie"])]
        print(f"\nN = {world}, 4 B all_reduce, process CPU us per call: collie's own call "
              f"{span(overhead['collie'])}, through the c10d adapter {span(overhead['adapter'])}; "
              f"the adapter adds {span(added)}")


if __name__ == "__main__":
    main()
