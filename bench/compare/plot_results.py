#!/usr/bin/env python3
"""Draws bench/compare results files (JSON, bench_results.py's schema) as SVG:
one file per collective and world size, <prefix><collective>_N<n>.svg.

    bench/compare/plot_results.py out/compare/results.json --out out/compare
    bench/compare/plot_results.py out/n2 out/n4 --out docs/images --prefix compare_

Each file has a panel of the time per call against the message size (log-log,
one line per library through the medians over the reps, a band from min to
max) and, for all_reduce, one of the bus bandwidth with T/N dashed (T: one
loopback TCP stream, measured in the same sitting). charts.py draws them with
matplotlib (Debian: python3-matplotlib).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_results  # noqa: E402
from bench_stats import human_bytes, median, reps_text  # noqa: E402
from charts import LogLogPanel, Series, write_chart  # noqa: E402


def series(table: dict, values: str) -> list:
    """One Series per library of a table ({label: {bytes: Record}}): the
    medians of the records' `values` (time_us or busbw_gbps), with min-max."""
    out = []
    for lab in bench_results.label_order(table):
        rows = [(b, getattr(r, values)) for b, r in sorted(table[lab].items())]
        rows = [(b, v) for b, v in rows if v and min(v) > 0]  # a log axis takes no zeros
        if rows:
            out.append(Series(lab, [(b, median(v)) for b, v in rows],
                              low=[min(v) for _, v in rows], high=[max(v) for _, v in rows]))
    return out


def panels(collective: str, n: int, table: dict, t: float | None) -> list:
    result = [LogLogPanel(f"time per call, N = {n}", "message size",
                          "us per call (median, min-max band)", series(table, "time_us"),
                          x_format=human_bytes)]
    bw = series(table, "busbw_gbps") if collective == "all_reduce" else []
    if bw:
        xs = [x for s in bw for x, _ in s.points]
        if t:
            bw.append(Series("T/N (one TCP stream / N)", [(min(xs), t / n), (max(xs), t / n)],
                             dash="6,4"))
        result.append(LogLogPanel(f"bus bandwidth, N = {n}", "message size",
                                  "busbw GB/s (median, min-max band)", bw,
                                  x_format=human_bytes))
    return result


def note(records: list) -> str:
    m = records[0].machine
    where = f"; {m.get('cpu')}, {m.get('cores')} cores, {m.get('start')}" if m else ""
    return f"lines: medians of {reps_text(r.reps for r in records)}, bands: min-max{where}"


def plot(records: list, out_dir: str, prefix: str = "") -> list:
    """Writes the SVGs; their paths."""
    os.makedirs(out_dir, exist_ok=True)
    t = bench_results.t_stream(records)
    paths = []
    for (collective, n), table in bench_results.by_table(records).items():
        rows = [r for rows in table.values() for r in rows.values()]
        title = f"{bench_results.TITLES.get(collective, collective)}, N = {n}, one host"
        path = os.path.join(out_dir, f"{prefix}{collective}_N{n}.svg")
        write_chart(path, title, panels(collective, n, table, t), note=note(rows))
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("inputs", nargs="+", help="results.json files, or run directories holding one")
    ap.add_argument("--out", required=True, metavar="DIR", help="where the SVGs go")
    ap.add_argument("--prefix", default="", help="file-name prefix, e.g. compare_")
    args = ap.parse_args()
    records = bench_results.merge(bench_results.load(p)[0] for p in args.inputs)
    for path in plot(records, args.out, args.prefix):
        print(path)


if __name__ == "__main__":
    main()
