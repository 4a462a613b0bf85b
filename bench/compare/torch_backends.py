#!/usr/bin/env python3
"""torch.distributed over collie against torch's gloo: same script, same processes.

    <venv>/bin/python bench/compare/torch_backends.py \\
        [--worlds 2 4] [--runs 5] [--max-bytes 67108864] [--ops all_reduce ...] \\
        [--ddp-runs 5] [--fsdp-runs 5] [--pipeline-runs 5] [--save results.json] \\
        [--plot docs/torch_backends.svg]

<venv> is an environment with torch 2.x and collie_torch (tools/collie.sh
makes them under ~/.cache/collie/venv-torch-<version>).

For each world size, --runs separate jobs (fresh processes each). In a job
every rank has both groups, collie (the default group) and gloo
(new_group), and times each of --ops (default all_reduce; also
all_to_all_single with a mixture-of-experts router's uneven split sizes,
all_gather_into_tensor, reduce_scatter_tensor) at each size on both, one
after the other, so the two see the same machine load. A size is the whole
buffer (the gathered output, the scattered input, either side of the
all_to_all). A time is the mean of one size's timed calls (float32, sum,
after warm-up), averaged over the ranks; the table shows, per size, the
median over the runs (and the min-max), and the speed-up of collie over
gloo (gloo's time / collie's: above 1, collie is faster).

Each job also measures what the adapter adds to collie's own C++ call for a
4-byte blocking all_reduce: --overhead-blocks alternating blocks (ABBA) of
2000 calls through collie's ProcessGroup and through the c10d interface
(collie_torch._time_allreduce, GIL released), in wall time, process CPU
time and the calling thread's CPU time per call. --overhead-only measures
only that, at any world size (1 too: no peer to wait for, the quietest
figure).

--ddp-runs N (default 0: skipped) adds torch's DistributedDataParallel on
Fashion-MNIST: samples/torch_ddp/train.py for one epoch of --ddp-steps steps
per rank, over collie and over gloo alternately, N times each per world size
(--ddp-args passes the same extra arguments to both); it reports the median
training samples/s (all ranks together, evaluation excluded) and CPU time
per step of each backend, and the speed-up of collie over gloo (collie's
rate / gloo's).

--fsdp-runs N (default 0: skipped) adds FSDP2 (samples/torch_fsdp/train.py,
fully_shard on a CPU mesh) the same way: one epoch of --fsdp-steps steps per
rank, collie and gloo alternately, N times each; it reports the median
training steps/s.

--moe-runs N (default 0: skipped) adds a mixture-of-experts layer, expert
parallel over all_to_all_single (samples/torch_moe/train.py: a router and
4 experts spread over the ranks) the same way: one epoch of --moe-steps
steps, collie and gloo alternately, N times each; median training steps/s.

--pipeline-runs N (default 0: skipped) adds pipeline parallelism
(samples/torch_pipeline/train.py: a small ViT cut into stages, torch's
--pipeline-args schedule, 1F1B unless they say otherwise) the same way: one
epoch of --pipeline-steps steps, collie and gloo alternately, N times each
per world size; it reports the median training steps/s (the first step,
which infers the stages' shapes, excluded) and the speed-up.

--save writes the measurements as JSON: the collectives' times as records of
bench_results.py's schema (impl "torch-collie" and "torch-gloo"), the
overhead, DDP, FSDP and pipeline figures as sections of their own. --load prints the
tables of such a file (or of one written before that schema) without
measuring, and --plot draws them as SVG (charts.py: matplotlib, python3-matplotlib).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))
import bench_results  # noqa: E402
import merge_results  # noqa: E402
from bench_stats import (fixed, fmt_span, fmt_speedup, human_bytes, median,  # noqa: E402
                         rate_speedup, speedup_header)
SAMPLES = os.path.join(os.path.dirname(HERE), "..", "..", "samples")
TRAIN = os.path.join(SAMPLES, "torch_ddp", "train.py")
TRAIN_FSDP = os.path.join(SAMPLES, "torch_fsdp", "train.py")
TRAIN_MOE = os.path.join(SAMPLES, "torch_moe", "train.py")
TRAIN_PIPELINE = os.path.join(SAMPLES, "torch_pipeline", "train.py")
# The pipeline sample evaluates the whole model on the main process after
# the epoch: on a slice of the test set, the bench times the training only.
PIPELINE_EVAL = ("--test-samples", "512")


def sizes(max_bytes):
    n = 4
    while n <= max_bytes:
        yield n
        n *= 4


def iterations(nbytes):
    return max(3, min(200, (8 << 20) // nbytes))


OVERHEAD_CALLS = 2000
OVERHEAD_METRICS = ("wall", "process CPU", "thread CPU")


# The ops --ops may time; a size is the whole buffer, as nccl-tests counts
# it (all_gather_into_tensor: the output, reduce_scatter_tensor: the input,
# all_to_all_single: either side).
OPS = ("all_reduce", "all_to_all_single", "all_gather_into_tensor", "reduce_scatter_tensor")


def router_splits(total, world, sender):
    """all_to_all_single's uneven split sizes of a mixture-of-experts
    router: what `sender` sends each rank (bench/compare/peer_sweep.h's
    router_splits, the same in every program)."""
    weight = [1 << ((p + sender) % world % 8) for p in range(world)]
    counts = [total * w // sum(weight) for w in weight]
    counts[sender] += total - sum(counts)
    return counts


def op_call(op, dist, data, nbytes, rank, world):
    """A callable running `op` at `nbytes` on a group, or None when the size
    holds no element per rank."""
    import torch
    n = nbytes // 4
    if op == "all_reduce":
        t = data[:n]
        return lambda group: dist.all_reduce(t, group=group)
    if n < world:
        return None
    part = n // world
    if op == "all_gather_into_tensor":
        out, inp = data[:part * world], torch.ones(part)
        return lambda group: dist.all_gather_into_tensor(out, inp, group=group)
    if op == "reduce_scatter_tensor":
        inp, out = data[:part * world], torch.empty(part)
        return lambda group: dist.reduce_scatter_tensor(out, inp, group=group)
    sends = router_splits(part * world, world, rank)
    recvs = [router_splits(part * world, world, p)[rank] for p in range(world)]
    inp, out = data[:part * world], torch.empty(sum(recvs))
    return lambda group: dist.all_to_all_single(out, inp, recvs, sends, group=group)


def worker(max_bytes, overhead_blocks, ops):
    import torch
    import torch.distributed as dist

    import collie_torch

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("collie")
    gloo = dist.new_group(backend="gloo")
    groups = {"collie": None, "gloo": gloo}
    data = torch.ones(max_bytes // 4)
    for op in ops:
        for nbytes in sizes(max_bytes):  # (--max-bytes 0: the overhead only)
            call = op_call(op, dist, data, nbytes, rank, world)
            if call is None:
                continue
            iters = iterations(nbytes)
            for name, group in groups.items():
                for _ in range(2):
                    call(group)
                dist.barrier(group=group)
                start = time.perf_counter()
                for _ in range(iters):
                    call(group)
                us = torch.tensor([(time.perf_counter() - start) * 1e6 / iters],
                                  dtype=torch.float64)
                dist.all_reduce(us, group=gloo)
                if rank == 0:
                    print(f"op {op} {name} {nbytes} {us.item() / world:.2f}", flush=True)
    pg = collie_torch.backend()
    small = torch.ones(1)
    collie_torch._C._time_allreduce(pg, small, OVERHEAD_CALLS, "adapter")  # warm-up
    # Alternating blocks, in the order ABBA so that a drift in the load
    # weighs on both paths alike; each pair gives one difference.
    for block in range(overhead_blocks):
        order = ("collie", "adapter") if block % 2 == 0 else ("adapter", "collie")
        for path in order:
            wall, process, thread = collie_torch._C._time_allreduce(pg, small, OVERHEAD_CALLS,
                                                                    path)
            if rank == 0:
                print(f"overhead {block} {path} {wall * 1e6:.3f} {process * 1e6:.3f} "
                      f"{thread * 1e6:.3f}", flush=True)
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


def run_job(world, max_bytes, overhead_blocks, ops):
    return run_ranks(world, [sys.executable, HERE, "--worker", "--max-bytes", str(max_bytes),
                             "--overhead-blocks", str(overhead_blocks), "--ops", *ops])


def train_stats(script, world, backend, steps, extra=()):
    """One epoch of `steps` steps of a sample; its log line."""
    with tempfile.TemporaryDirectory(prefix="torch_backends_train_") as out:
        run_ranks(world, [sys.executable, script, "--backend", backend, "--epochs", "1",
                          "--max-steps", str(steps), "--print-freq", "100000", "--output-dir",
                          out, *extra])
        with open(os.path.join(out, "log.txt")) as f:
            return json.loads(f.readline())


def ddp_samples_per_s(world, backend, steps, extra=()):
    stats = train_stats(TRAIN, world, backend, steps, extra)
    return stats["train_samples_per_s"], stats["train_cpu_ms_per_step"]


def span(values, digits=1):
    return fmt_span(list(values), fixed(digits))


BACKENDS = {"collie": ("torch-collie", "auto"), "gloo": ("torch-gloo", "tcp")}


# torch's names of the ops, as bench_results names the collectives.
COLLECTIVE = {"all_reduce": "all_reduce", "all_to_all_single": "all_to_all_uneven",
              "all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter"}


def to_records(all_reduce, machine, command=""):
    """The times ({world: {"op backend bytes": [us per run]}}; "backend
    bytes" in files written before --ops: all_reduce) as bench_results
    records."""
    records = []
    for world, times in all_reduce.items():
        for key, runs in times.items():
            fields = key.split()
            op = fields[0] if len(fields) == 3 else "all_reduce"
            backend, nbytes = fields[-2:]
            impl, transport = BACKENDS[backend]
            r = bench_results.Record(impl, transport, COLLECTIVE[op], int(world), int(nbytes),
                                     iters=iterations(int(nbytes)), warmup=2, machine=machine,
                                     command=command)
            for us in runs:
                r.add(us)
            records.append(r)
    return records


def load(path):
    """The results of a --save file, or of one written before bench_results
    (an "all_reduce" section), with the records as Record objects."""
    with open(path) as f:
        results = json.load(f)
    records = [bench_results.from_json(r) for r in results.pop("records", [])]
    records += to_records(results.pop("all_reduce", {}), {})
    results.pop("schema", None)
    return dict(results, records=records)


def save(path, results):
    extra = {k: v for k, v in results.items() if k != "records"}
    bench_results.save(path, results["records"], extra)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    p.add_argument("--ddp-runs", type=int, default=0)
    p.add_argument("--ddp-steps", type=int, default=200, help="training steps per rank")
    p.add_argument("--ddp-args", default="",
                   help="more arguments for train.py, the same for both backends "
                   "(e.g. '--threads 2 --batch-size 256')")
    p.add_argument("--fsdp-runs", type=int, default=0)
    p.add_argument("--fsdp-steps", type=int, default=60, help="FSDP2 training steps per rank")
    p.add_argument("--fsdp-args", default="",
                   help="more arguments for samples/torch_fsdp/train.py, the same for both "
                   "backends (e.g. '--model vit')")
    p.add_argument("--pipeline-runs", type=int, default=0)
    p.add_argument("--pipeline-steps", type=int, default=60,
                   help="pipeline training steps (batches) per run")
    p.add_argument("--pipeline-args", default="",
                   help="more arguments for samples/torch_pipeline/train.py, the same for both "
                   "backends (e.g. '--schedule InterleavedZeroBubble --microbatches 8')")
    p.add_argument("--moe-runs", type=int, default=0)
    p.add_argument("--moe-steps", type=int, default=150,
                   help="mixture-of-experts training steps per rank and run")
    p.add_argument("--skip-all-reduce", action="store_true",
                   help="time none of --ops (only the training figures)")
    p.add_argument("--ops", nargs="+", default=["all_reduce"], choices=OPS,
                   help="the collectives timed at each size, collie against gloo")
    p.add_argument("--overhead-blocks", type=int, default=10,
                   help="alternating blocks of 2000 calls per path and job for the adapter's "
                   "overhead")
    p.add_argument("--overhead-only", action="store_true",
                   help="measure only the adapter's overhead (any world size, 1 too)")
    p.add_argument("--save", metavar="JSON", help="write the measurements to JSON")
    p.add_argument("--load", metavar="JSON",
                   help="measure nothing: print the tables (and --plot) of a --save file")
    p.add_argument("--plot", metavar="SVG", help="draw the all_reduce times and the DDP rates")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args.max_bytes, args.overhead_blocks, args.ops)
    results = load(args.load) if args.load else measure(args)
    if args.save:
        save(args.save, results)
    print_tables(results)
    fsdp_table(results)
    pipeline_table(results)
    moe_table(results)
    if args.plot:
        plot(results, args.plot)


def measure(args):
    """{"records": [all_reduce records, one per backend, world and size],
    "overhead": {world: [per job {block: {path: [wall, process, thread]}}]},
    "ddp": {world: {backend: [samples/s per run]}}, and how it was run}."""
    machine = bench_results.machine_info()
    all_reduce = {}
    results = {"runs": args.runs, "ddp_steps": args.ddp_steps, "ddp_args": args.ddp_args,
               "fsdp_steps": args.fsdp_steps, "fsdp_args": args.fsdp_args,
               "pipeline_steps": args.pipeline_steps, "pipeline_args": args.pipeline_args,
               "moe_steps": args.moe_steps,
               "overhead": {}, "ddp": {}, "ddp_cpu_ms": {}, "fsdp": {}, "pipeline": {},
               "moe": {}}
    if args.overhead_only:
        args.max_bytes = 0
    if not args.skip_all_reduce:
        for world in args.worlds:
            times, jobs = {}, []
            for _ in range(args.runs):
                job = {}
                for line in run_job(world, args.max_bytes, args.overhead_blocks, args.ops):
                    kind, *rest = line.split()
                    if kind == "op":
                        times.setdefault(" ".join(rest[:3]), []).append(float(rest[3]))
                    elif kind == "overhead":
                        job.setdefault(rest[0], {})[rest[1]] = [float(x) for x in rest[2:]]
                jobs.append(job)
            all_reduce[str(world)] = times
            results["overhead"][str(world)] = jobs
    for world in args.worlds if args.ddp_runs > 0 else []:
        rates, cpu = {"collie": [], "gloo": []}, {"collie": [], "gloo": []}
        for _ in range(args.ddp_runs):
            for backend in rates:  # alternately, so that both see the same load
                rate, cpu_ms = ddp_samples_per_s(world, backend, args.ddp_steps,
                                                 args.ddp_args.split())
                rates[backend].append(rate)
                cpu[backend].append(cpu_ms)
        results["ddp"][str(world)] = rates
        results["ddp_cpu_ms"][str(world)] = cpu
    for world in args.worlds if args.fsdp_runs > 0 else []:
        rates = {"collie": [], "gloo": []}
        for _ in range(args.fsdp_runs):
            for backend in rates:  # alternately, so that both see the same load
                stats = train_stats(TRAIN_FSDP, world, backend, args.fsdp_steps,
                                    args.fsdp_args.split())
                rates[backend].append(stats["train_steps_per_s"])
        results["fsdp"][str(world)] = rates
    for world in args.worlds if args.moe_runs > 0 else []:
        rates = {"collie": [], "gloo": []}
        for _ in range(args.moe_runs):
            for backend in rates:  # alternately, so that both see the same load
                stats = train_stats(TRAIN_MOE, world, backend, args.moe_steps)
                rates[backend].append(stats["train_steps_per_s"])
        results["moe"][str(world)] = rates
    for world in args.worlds if args.pipeline_runs > 0 else []:
        rates = {"collie": [], "gloo": []}
        for _ in range(args.pipeline_runs):
            for backend in rates:  # alternately, so that both see the same load
                stats = train_stats(TRAIN_PIPELINE, world, backend, args.pipeline_steps,
                                    [*PIPELINE_EVAL, *args.pipeline_args.split()])
                rates[backend].append(stats["train_steps_per_s"])
        results["pipeline"][str(world)] = rates
    bench_results.finish_machine(machine)
    command = (f"RANK=r WORLD_SIZE=n {sys.executable} {HERE} --worker --max-bytes "
               f"{args.max_bytes} --overhead-blocks {args.overhead_blocks} --ops "
               f"{' '.join(args.ops)}")
    results["records"] = to_records(all_reduce, machine, command)
    return results


def print_tables(results):
    if results["records"]:
        print("torch.distributed's collectives (float32; reductions sum; all_to_all_single "
              "with a router's uneven splits, listed as all_to_all_uneven), collie against "
              "gloo in the same processes\n")
        print(merge_results.render(results["records"]))
    for world, jobs in results.get("overhead", {}).items():
        if any(jobs):  # --overhead-blocks 0 leaves each job's empty
            overhead_table(world, jobs)
    if results["ddp"]:
        extra = f", train.py {results['ddp_args']}" if results["ddp_args"] else ""
        print(f"\nDDP on Fashion-MNIST (samples/torch_ddp/train.py, {results['ddp_steps']} steps "
              f"per rank{extra}): training samples/s, median (min-max) of the runs\n")
        print("speed-up: collie's rate / gloo's, of the medians; paired: the median (min-max) "
              "of the runs made one after the other (each pair saw about the same load)\n")
        print(f"| ranks | collie | gloo | {speedup_header('gloo')} | paired | CPU ms per step, "
              "collie | gloo |\n| --- | --- | --- | --- | --- | --- | --- |")
    for world, rates in results["ddp"].items():
        c, g = rates["collie"], rates["gloo"]
        cpu = results.get("ddp_cpu_ms", {}).get(world)
        cpu_cells = f"{span(cpu['collie'], 2)} | {span(cpu['gloo'], 2)}" if cpu else "- | -"
        print(f"| {world} | {span(c)} | {span(g)} | {fmt_speedup(rate_speedup(c, g))} | "
              f"{paired(c, g)} | {cpu_cells} |", flush=True)


def paired(collie_rates, gloo_rates):
    """Median (min-max) of the speed-ups of the runs made one after the other."""
    return span([a / b for a, b in zip(collie_rates, gloo_rates)], 2)


def rates_table(results, key, caption, digits=2):
    """The training rates of results[key] ({world: {"collie": [...], "gloo":
    [...]}}) under `caption`, one line per world size."""
    if not results.get(key):
        return
    print(f"\n{caption}: training steps/s, median (min-max) of the runs\n")
    print(f"| ranks | collie | gloo | {speedup_header('gloo')} | paired |\n"
          "| --- | --- | --- | --- | --- |")
    for world, rates in results[key].items():
        c, g = rates["collie"], rates["gloo"]
        print(f"| {world} | {span(c, digits)} | {span(g, digits)} | "
              f"{fmt_speedup(rate_speedup(c, g))} | {paired(c, g)} |", flush=True)


def fsdp_table(results):
    extra = f" {results['fsdp_args']}" if results.get("fsdp_args") else ""
    rates_table(results, "fsdp", f"FSDP2 on Fashion-MNIST (samples/torch_fsdp/train.py{extra}, "
                f"{results.get('fsdp_steps')} steps per rank)")


def moe_table(results):
    rates_table(results, "moe", "A mixture-of-experts layer, expert parallel over "
                f"all_to_all_single (samples/torch_moe/train.py, {results.get('moe_steps')} steps "
                "per rank)", digits=1)


def pipeline_table(results):
    extra = f" {results['pipeline_args']}" if results.get("pipeline_args") else ""
    rates_table(results, "pipeline", "Pipeline parallelism on Fashion-MNIST "
                f"(samples/torch_pipeline/train.py{extra}, {results.get('pipeline_steps')} steps)")


def overhead_table(world, jobs):
    """jobs: per job, per block, per path, (wall, process CPU, thread CPU) us
    per call. Per job the median over its blocks of the path's figure and of
    the paired difference (adapter - collie); per table line the median (and
    min-max) of those over the jobs."""
    print(f"\nN = {world}, 4 B blocking all_reduce, us per call, median (min-max) over "
          f"{len(jobs)} jobs of each job's median over {len(jobs[0])} alternating blocks of "
          f"{OVERHEAD_CALLS} calls per path\n")
    print("| figure | collie's own call | through the c10d adapter | the adapter adds |\n"
          "| --- | --- | --- | --- |")
    for m, metric in enumerate(OVERHEAD_METRICS):
        own, through, added = [], [], []
        for job in jobs:
            pairs = [(b["collie"][m], b["adapter"][m]) for b in job.values()]
            own.append(median(c for c, _ in pairs))
            through.append(median(a for _, a in pairs))
            added.append(median(a - c for c, a in pairs))
        print(f"| {metric} | {span(own, 2)} | {span(through, 2)} | {span(added, 2)} |",
              flush=True)


def plot(results, path):
    """One panel per world size (all_reduce us per call against the size,
    median line and min-max band per backend) and one of the DDP rates."""
    try:
        from plot_results import series
        from charts import BarPanel, LogLogPanel, write_chart
    except ImportError as e:
        # torch's venv often has no matplotlib: the measurements are not
        # lost, --load redraws them with the system's python.
        print(f"\nno plot: {e}\n(redraw with: /usr/bin/python3 {HERE} --load RESULTS.json "
              f"--plot {path}, RESULTS.json being this run's --save file)", file=sys.stderr)
        return

    panels = []
    for (_, world), table in bench_results.by_table(results["records"]).items():
        panels.append(LogLogPanel(f"torch all_reduce, N = {world}", "message size (float32 sum)",
                                  "us per call (median, min-max band)", series(table, "time_us"),
                                  x_format=human_bytes))
    if results["ddp"]:
        worlds = list(results["ddp"])
        values, low, high = {}, {}, {}
        for backend in ("collie", "gloo"):
            name = bench_results.label(*BACKENDS[backend])
            rates = [results["ddp"][w][backend] for w in worlds]
            values[name] = [median(r) for r in rates]
            low[name] = [min(r) for r in rates]
            high[name] = [max(r) for r in rates]
        panels.append(BarPanel("torch DDP, Fashion-MNIST MLP", "training samples/s (all ranks)",
                               [f"{w} ranks" for w in worlds], values, low, high))
    write_chart(path, "collie vs gloo under torch.distributed (bench/compare/torch_backends.py)",
                panels, note="lines and bars: medians over the runs; bands and whiskers: min-max")
    print(f"\nplot: {path}")


if __name__ == "__main__":
    main()
