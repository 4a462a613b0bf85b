#!/usr/bin/env python3
"""Merges bench/compare results files (JSON, bench_results.py's schema) and
renders them as Markdown tables, optionally with their SVG plots.

    bench/compare/merge_results.py out/compare                  # its results.json
    bench/compare/merge_results.py out/n2/results.json out/n4/results.json \\
        --json out/all.json --md out/all.md --plot out/plots

One table per collective and world size: per library the time per call in us,
median (min-max) over the reps, with all_reduce's bus bandwidth (median,
GB/s), then the speed-up of collie over each peer (the peer's time / collie's
time, medians: above 1, collie is faster). Which collie a peer is set against:
for all_reduce collie's default run (shared memory on one host, what a user on
one host gets), for all_to_all and the ping-pong collie on the peer's
transport (shm against Open MPI's shm, TCP against TCP) where that was
measured. Files measured apart (another size range, another world size) join;
the same configuration in several files has its samples joined. --fastest
puts one column, collie's speed-up over the fastest peer at that size, in
place of the per-peer ones (allreduce_compare.py's tables of many peers).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_results  # noqa: E402
from bench_stats import (SPEEDUP_RULE, fixed, fmt_span, fmt_speedup, human_bytes,  # noqa: E402
                         median, parse_bytes, reps_text, speedup, speedup_header)

# An extra column of render(): (header, cell(collective, nranks, bytes) -> text).
Column = tuple[str, Callable[[str, int, int], str]]


def pairs(table: dict, collective: str) -> list:
    """[(collie label, peer label)] for the speed-up columns of one table
    ({label: {bytes: Record}})."""
    first = {lab: next(iter(rows.values())) for lab, rows in table.items()}
    order = bench_results.label_order(first)
    collies = [lab for lab in order if first[lab].is_collie]
    if not collies:
        return []
    default = [lab for lab in collies if first[lab].transport == "auto"] or collies
    if collective == "all_reduce":  # every other run against collie's default
        return [(default[0], peer) for peer in order if peer != default[0]]
    out = []
    for peer in order:  # each peer against collie on its transport
        if peer not in collies:
            same = [c for c in collies if first[c].transport == first[peer].transport]
            out.append(((same or default)[0], peer))
    return out


def fastest_peer(records: list) -> Column:
    """A column of collie's (default transport) speed-up over the fastest
    peer at each size (that peer's median time / collie's), naming the peer."""
    def cell(collective: str, n: int, nbytes: int) -> str:
        here = [r for r in records if (r.collective, r.nranks, r.bytes) == (collective, n, nbytes)
                and r.time_us]
        collie = next((r for r in here if r.impl == "collie" and r.transport == "auto"), None)
        peers = [r for r in here if not r.is_collie]
        if collie is None or not peers:
            return ""
        best = min(peers, key=lambda r: median(r.time_us))
        return f"{fmt_speedup(speedup(best.time_us, collie.time_us))} ({best.label})"
    return ("collie over the fastest peer", cell)


def summary(records: list, sizes: list) -> str:
    """Markdown: per world size, one row per collective and one column per
    size of `sizes`: collie's (default transport) median time in us / its
    speed-up over the fastest peer there (that peer's median / collie's)."""
    out = []
    for n in sorted({r.nranks for r in records}):
        here = [r for r in records if r.nranks == n and r.time_us]
        collectives = [c for c in bench_results.TITLES if any(r.collective == c for r in here)]
        if not collectives:
            continue
        out += [f"N={n}: collie us / speed-up over the fastest peer", "",
                "| call | " + " | ".join(human_bytes(b) for b in sizes) + " |",
                "|---" * (len(sizes) + 1) + "|"]
        for c in collectives:
            cells = []
            for b in sizes:
                at = [r for r in here if (r.collective, r.bytes) == (c, b)]
                collie = next((r for r in at if r.impl == "collie" and r.transport == "auto"),
                              None)
                peers = [r for r in at if not r.is_collie]
                if collie is None:
                    cells.append("-")
                    continue
                t = median(collie.time_us)
                text = f"{t:.3g}" if t < 1000 else f"{t:.0f}"
                if peers:
                    best = min(peers, key=lambda r: median(r.time_us))
                    text += f" / {median(best.time_us) / t:.2f}"
                cells.append(text)
            out.append(f"| {c} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def caption(records: list) -> list:
    """The lines above the tables: the machines, T and memcpy, the rules."""
    sittings = bench_results.machines(records)
    lines = [f"Machine: {bench_results.describe_machine(m)}." for m in sittings]
    t = [x for m in sittings for x in m.get("tcp_stream_gbps", [])]
    mem = [x for m in sittings for x in m.get("memcpy_gbps", [])]
    if t:
        two = fixed(2)
        lines.append(f"T (one loopback TCP stream) = {fmt_span(t, two)} GB/s, "
                     f"memcpy = {fmt_span(mem, two)} GB/s.")
    reps = reps_text(r.reps for r in records)
    bw = "; busbw in GB/s (median)" if any(r.collective == "all_reduce" for r in records) else ""
    lines.append(f"Time per call in us, median (min-max) over {reps}{bw}; {SPEEDUP_RULE}.")
    return lines + [""]


def render(records: list, extra: Optional[list[Column]] = None, each_peer: bool = True) -> str:
    """Markdown: the caption, then one table per (collective, world size).
    extra: more columns for every table; one left empty in a whole table is
    left out of it. each_peer: a speed-up column per peer (else only the
    extra ones, for tables of many peers)."""
    out = caption(records)
    t = bench_results.t_stream(records)
    for (collective, n), table in bench_results.by_table(records).items():
        title = bench_results.TITLES.get(collective, collective)
        tn = f" (T/N = {t / n:.2f} GB/s)" if t and collective == "all_reduce" else ""
        out += [f"### {title}, N = {n}{tn}", ""] + render_table(collective, n, table, extra or [],
                                                                 each_peer)
    return "\n".join(out)


def render_table(collective: str, n: int, table: dict, extra: list,
                 each_peer: bool = True) -> list:
    """The lines of one table ({label: {bytes: Record}})."""
    labels = bench_results.label_order(table)
    with_bw = collective == "all_reduce"
    ratios = pairs(table, collective) if each_peer else []
    head = ["size"] + [f"{lab} us / busbw" if with_bw else f"{lab} us" for lab in labels]
    head += [speedup_header(peer, ref) for ref, peer in ratios]
    rows = []
    for b in sorted({b for rows in table.values() for b in rows}):
        cells = [human_bytes(b)]
        for lab in labels:
            r = table[lab].get(b)
            cell = fmt_span(r.time_us) if r else "-"
            if r and with_bw and r.busbw_gbps:
                cell += f" / {median(r.busbw_gbps):.3f}"
            cells.append(cell)
        for ref, peer in ratios:
            c, p = table[ref].get(b), table[peer].get(b)
            cells.append(fmt_speedup(speedup(p.time_us, c.time_us) if c and p else None))
        rows.append((cells, [cell(collective, n, b) for _, cell in extra]))
    keep = [i for i in range(len(extra)) if any(more[i] for _, more in rows)]
    head += [extra[i][0] for i in keep]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(cells + [more[i] for i in keep]) + " |" for cells, more in rows]
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("inputs", nargs="+", help="results.json files, or run directories holding one")
    ap.add_argument("--json", metavar="FILE", help="write the merged records here")
    ap.add_argument("--md", metavar="FILE", help="write the Markdown here (it is printed anyway)")
    ap.add_argument("--plot", metavar="DIR", help="draw the SVG plots here (plot_results.py)")
    ap.add_argument("--prefix", default="", help="file-name prefix of the plots")
    ap.add_argument("--fastest", action="store_true",
                    help="one speed-up column, over the fastest peer, instead of one per peer")
    ap.add_argument("--summary", metavar="SIZES",
                    help="print only a summary: per world size, a row per collective and a "
                    "column per size of the comma-separated SIZES (4,64,1K,...): collie's time "
                    "/ its speed-up over the fastest peer")
    args = ap.parse_args()
    records = bench_results.merge(bench_results.load(p)[0] for p in args.inputs)
    if args.json:
        bench_results.save(args.json, records)
    if args.summary:
        print(summary(records, [parse_bytes(s) for s in args.summary.split(",")]))
        return
    text = render(records, [fastest_peer(records)], False) if args.fastest else render(records)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    if args.plot:
        import plot_results
        for path in plot_results.plot(records, args.plot, args.prefix):
            print(f"plot: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
