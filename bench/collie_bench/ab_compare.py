#!/usr/bin/env python3
"""Two collie-bench binaries side by side: medians of several alternating runs.

A change that should cost nothing (docs/performance.md, "TCP on Asio") is
shown by running the binary before it (A) and after it (B) in one sitting,
alternating A and B for every configuration so that the load of a shared
machine falls on both alike, and comparing the medians of the time per call.

    bench/collie_bench/ab_compare.py OLD/collie-bench NEW/collie-bench \\
        --runs 5 --nproc 2 4 --transport tcp
    bench/collie_bench/ab_compare.py OLD/collie-bench NEW/collie-bench --runs 15 \\
        --nproc 1 2 --transport auto --small-only --blocking-only --small-iters 400000

For each world size and mode (blocking, and back to back: the async path) it
runs a 4-byte size with many iterations and the large sizes with a few, and
prints one markdown table per world size: median (min-max) us of A and B,
the ratio B/A of the medians, and the median of the ratios of each run's
A and B (adjacent in time, so that a burst of load falls on one pair).
"""
import argparse
import json
import os
import sys
import statistics
import subprocess
import tempfile

# (sizes, iterations, warm-up): small messages need many calls to be timed.
SIZES = [(["-b", "4", "-e", "4"], "1000", "100"), (["-b", "4M", "-e", "64M", "-f", "16"], "10", "2")]


def run(binary, nproc, transport, blocking, sizes, iters, warmup, collective="all_reduce"):
    """{bytes: us per call} of one collie-bench run."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = [binary, "--nproc", str(nproc), "--transport", transport, *sizes,
                "-n", iters, "-w", warmup, "--json", out.name, "-C", collective]
        if blocking:
            argv.append("--blocking")
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, timeout=600)
        return {r["bytes"]: r["time_us"] for r in json.load(open(out.name))["results"]}


# The one "median (min-max)" formatter of the bench scripts (two decimals
# below 10 us, where a change moves the figure by hundredths).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare"))
from bench_stats import fmt_span as span  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", help="collie-bench before the change")
    p.add_argument("b", help="collie-bench after the change")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    p.add_argument("--transport", default="tcp")
    p.add_argument("--collective", default="all_reduce",
                   help="collie-bench's -C (sendrecv: the ping-pong's one-way time)")
    p.add_argument("--small-iters", default="1000",
                   help="calls timed at 4 bytes (sub-microsecond calls need 10^5 or more)")
    p.add_argument("--small-only", action="store_true", help="skip the large sizes")
    p.add_argument("--blocking-only", action="store_true", help="skip the back-to-back mode")
    args = p.parse_args()
    small = (SIZES[0][0], args.small_iters, str(max(100, int(args.small_iters) // 10)))
    sizes_run = [small] if args.small_only else [small, SIZES[1]]
    for nproc in args.nproc:
        times = {}  # (mode, bytes, which) -> [us]
        for _ in range(args.runs):
            for blocking in (True,) if args.blocking_only else (True, False):
                mode = "blocking" if blocking else "back to back"
                for sizes, iters, warmup in sizes_run:
                    for which, binary in (("A", args.a), ("B", args.b)):
                        got = run(binary, nproc, args.transport, blocking, sizes, iters, warmup,
                                  args.collective)
                        for size, us in got.items():
                            times.setdefault((mode, size, which), []).append(us)
        print(f"\n#### N = {nproc}, --transport {args.transport}: median (min-max) us "
              f"over {args.runs} runs\n")
        print("| mode | bytes | A (before) | B (after) | B/A of medians | median of B/A per run |")
        print("|---|---:|---:|---:|---:|---:|")
        for mode, size in sorted({(m, s) for m, s, _ in times}, key=lambda k: (k[0], k[1])):
            a, b = times[(mode, size, "A")], times[(mode, size, "B")]
            ratio = statistics.median(b) / statistics.median(a)
            paired = statistics.median(y / x for x, y in zip(a, b))
            print(f"| {mode} | {size} | {span(a)} | {span(b)} | {ratio:.2f} | {paired:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
