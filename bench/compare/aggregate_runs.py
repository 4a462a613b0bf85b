#!/usr/bin/env python3
"""Medians over several sittings of run_compare.sh, from their results.json.

One sitting on a small shared VM is a noisy sample: the same size can differ
2-3x between two runs a minute apart, and T (one loopback TCP stream, the
yardstick of the busbw goal) moved between 3.2 and 5.3 GB/s in six
back-to-back runs. This reads the results.json of each run directory (or
results file) given and prints merge_results.py's tables over all their
reps, with two more columns per all_reduce table:

  collie busbw / (T/N)  from 1 MiB: collie's (default transport) busbw over
                        T/N, with each rep's own T, median (min-max)
  collie fastest        in how many reps collie was faster than every peer
                        (collie TCP is not a peer: it is collie)

    for i in 1 2 3 4 5 6; do bench/compare/run_compare.sh build out/run$i; done
    bench/compare/aggregate_runs.py out/run*
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_results  # noqa: E402
import merge_results  # noqa: E402
from bench_stats import fixed, fmt_span  # noqa: E402


def reps(sittings: list, collective: str, n: int, nbytes: int):
    """Per sitting and rep: (collie's default record, the peers' records, rep
    index, the rep's T or None)."""
    for records in sittings:
        here = [r for r in records
                if (r.collective, r.nranks, r.bytes) == (collective, n, nbytes)]
        collie = next((r for r in here if r.impl == "collie" and r.transport == "auto"), None)
        if collie is None:
            continue
        peers = [r for r in here if not r.is_collie]
        ts = collie.machine.get("tcp_stream_gbps", [])
        for i in range(collie.reps):
            yield collie, peers, i, ts[i] if i < len(ts) else None


def busbw_over_t(sittings: list):
    def cell(collective: str, n: int, nbytes: int) -> str:
        if collective != "all_reduce" or nbytes < 1 << 20:
            return ""
        ratios = [c.busbw_gbps[i] / (t / n) for c, _, i, t in reps(sittings, collective, n, nbytes)
                  if t and i < len(c.busbw_gbps)]
        return fmt_span(ratios, fixed(2))
    return cell


def fastest(sittings: list):
    def cell(collective: str, n: int, nbytes: int) -> str:
        if collective != "all_reduce":
            return ""
        runs = list(reps(sittings, collective, n, nbytes))
        wins = sum(1 for c, peers, i, _ in runs
                   if all(c.time_us[i] <= p.time_us[i] for p in peers if i < p.reps))
        return f"{wins}/{len(runs)}" if runs else "-"
    return cell


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("inputs", nargs="+", help="run directories, or their results.json")
    sittings = [bench_results.load(p)[0] for p in ap.parse_args().inputs]
    t = [fmt_span(m.get("tcp_stream_gbps", []), fixed(2))
         for records in sittings for m in bench_results.machines(records)]
    plural = "" if len(sittings) == 1 else "s"
    print(f"{len(sittings)} sitting{plural}; T per sitting (GB/s): {', '.join(t)}\n")
    extra = [("collie busbw / (T/N)", busbw_over_t(sittings)),
             ("collie fastest", fastest(sittings))]
    print(merge_results.render(bench_results.merge(sittings), extra))


if __name__ == "__main__":
    main()
