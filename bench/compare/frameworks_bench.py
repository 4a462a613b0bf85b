"""Steps per second of each training framework on gloo and on collie: the
scripts of test/frameworks (a tiny MLP, SGD, batch 8 per rank), each run
launched as its users launch it, at 2 and 4 ranks.

    python3 bench/compare/frameworks_bench.py [--cases lightning accelerate ...]
        [--nproc 2 4] [--reps 5] [--steps 300] [--venv DIR] [--save JSON]

For each case and rep: one run on one rank (no communication: the same
framework, the same per-rank batch, a group of one; only in the first
--one-rank-reps reps), then for each world size one run on gloo and one on
collie, the order of the two swapped every
rep (gloo first on even reps, collie first on odd ones), so that a slow
stretch of a shared machine falls on both. A run's rate is its training
loop's steps over the loop's seconds, as the script measures it (start-up,
rendezvous and the first step's set-up excluded).

Printed per case and world size: the median steps/s of each backend (min-max
in brackets), collie / gloo of the medians, the median of the per-rep ratios
("paired"), and the communication share of a step on each backend:
1 - t1 / tN, where t1 is the one-rank run's median step time and tN the
N-rank run's. A share near 0 means the step is the framework's own work
(compute-bound, for this model: Python and the optimizer, not the
arithmetic); near 1, waiting on collectives. With more ranks than cores the
N ranks also share the cores, which tN includes and t1 does not: the share
then counts that too (the table says how many cores there were).

Runs in the frameworks environment (test/frameworks/make_venv.sh), re-running
itself with its Python, as test/frameworks/run_frameworks.py does.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FW = os.path.join(ROOT, "test", "frameworks")
sys.path.insert(0, FW)
import run_frameworks  # noqa: E402

# One case per framework: DeepSpeed's ZeRO 1 (what the issue asks for first);
# --cases takes any of run_frameworks.CASES.
DEFAULT_CASES = ["lightning", "accelerate", "deepspeed-zero1", "ray"]


def one_run(case, backend, steps, nproc, tmp):
    argv, rc, log, out, wall = run_frameworks.run_one(case, backend, steps, tmp, nproc)
    if rc != 0 or not os.path.exists(out):
        print(log[-4000:], file=sys.stderr)
        raise SystemExit(f"frameworks_bench: {case} on {backend}, {nproc} ranks: "
                         f"{' '.join(argv)} exited with {rc}")
    import torch
    info = torch.load(out)["info"]
    os.remove(out)
    if info.get("pg_backend") != backend:
        raise SystemExit(f"frameworks_bench: {case}: ran on {info.get('pg_backend')!r}, "
                         f"not {backend!r}")
    return info["steps"] / info["seconds"], wall


def fmt(xs):
    return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--venv", default=run_frameworks.DEFAULT_VENV)
    p.add_argument("--cases", nargs="+", default=DEFAULT_CASES,
                   choices=sorted(c for c, v in run_frameworks.CASES.items() if v[3] is None))
    p.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--one-rank-reps", type=int, default=3,
                   help="runs on one rank per case (the baseline of the communication share)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--save", metavar="JSON")
    args = p.parse_args(argv)

    python = os.path.join(args.venv, "bin", "python")
    if os.path.realpath(os.path.dirname(sys.executable)) != os.path.realpath(
            os.path.join(args.venv, "bin")):
        if not os.path.exists(python):
            raise SystemExit(f"frameworks_bench: no frameworks environment at {args.venv} "
                             "(test/frameworks/make_venv.sh makes it)")
        os.execv(python, [python, os.path.abspath(__file__)] + argv)

    import torch
    load0 = os.getloadavg()
    print(f"frameworks_bench: torch {torch.__version__}, {os.cpu_count()} cores, "
          f"load average {load0[0]:.2f} at the start; {args.steps} steps per run, "
          f"{args.reps} reps", flush=True)
    rates = {}  # (case, nproc, backend) -> [steps/s]
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="collie-fwbench-") as tmp:
        for case in args.cases:
            for rep in range(args.reps):
                if rep < args.one_rank_reps:
                    r, _ = one_run(case, "gloo", args.steps, 1, tmp)
                    rates.setdefault((case, 1, "none"), []).append(r)
                for n in args.nproc:
                    order = ("gloo", "collie") if rep % 2 == 0 else ("collie", "gloo")
                    for backend in order:
                        r, wall = one_run(case, backend, args.steps, n, tmp)
                        rates.setdefault((case, n, backend), []).append(r)
                        print(f"  {case} rep {rep}: {n} ranks {backend}: {r:.0f} steps/s "
                              f"({wall:.1f} s wall, load {os.getloadavg()[0]:.2f})", flush=True)
            if args.save:
                with open(args.save, "w") as f:
                    json.dump({"steps": args.steps, "reps": args.reps, "cores": os.cpu_count(),
                               "rates": {"|".join(map(str, k)): v for k, v in rates.items()}},
                              f, indent=1)
    load1 = os.getloadavg()
    print(f"\n{time.monotonic() - t_start:.0f} s; load average {load1[0]:.2f} "
          f"(1 min), {load1[2]:.2f} (15 min) at the end; {os.cpu_count()} cores\n")
    print("| framework | ranks | gloo steps/s | collie steps/s | collie / gloo | paired "
          "| 1 rank steps/s | comm share gloo | comm share collie |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for case in args.cases:
        one = statistics.median(rates[(case, 1, "none")])
        for n in args.nproc:
            g, c = rates[(case, n, "gloo")], rates[(case, n, "collie")]
            gm, cm = statistics.median(g), statistics.median(c)
            paired = statistics.median(ci / gi for ci, gi in zip(c, g))
            print(f"| {case} | {n} | {fmt(g)} | {fmt(c)} | {cm / gm:.2f} | {paired:.2f} "
                  f"| {one:.0f} | {1 - gm / one:.0%} | {1 - cm / one:.0%} |")


if __name__ == "__main__":
    main(sys.argv[1:])
