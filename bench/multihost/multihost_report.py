#!/usr/bin/env python3
"""Tables and the plot of bench/multihost's results (multihost_compare.py
writes them; this redraws them from its OUT/<rate>/results.json files).

    bench/multihost/multihost_report.py out/multihost/10gbit out/multihost/1gbit \\
        --md out/multihost/results.md --svg docs/images/multihost.svg
    bench/multihost/multihost_report.py docs/multihost_10gbit.json \\
        docs/multihost_1gbit.json --summary        # docs/performance.md's tables

Per link rate, one table of all_reduce and one of the other collectives:
per library the time per call (median over the reps), then collie's bus
bandwidth as a fraction of the link rate (at best each host sends and
receives the link rate at once) and of the roof (the lower of the link rate
and what every host streaming TCP to the next at once reaches: on a small
machine its cores, not the link, are the limit), and the speed-up of collie over the
fastest peer at that size (its time / collie's, medians; above 1 collie is
faster). The plot: all_reduce's busbw / link rate and time per call, per
rate, medians with a min-max band.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "compare"))
import bench_results  # noqa: E402
from bench_stats import human_bytes, median, reps_text  # noqa: E402
from charts import LogLogPanel, Series, write_chart  # noqa: E402

bench_results.LABELS.update({("gloo-hd", "tcp"): "Gloo HD",
                             ("openmpi", "vader+tcp"): "Open MPI vader+TCP"})
ORDER = ["collie", "Gloo ring", "Gloo HD", "Open MPI vader+TCP", "torch gloo"]


def parse_rate(rate: str) -> float:
    """A tc rate as bits/s: '10gbit' -> 1e10."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for unit, scale in units.items():
        if rate.lower().endswith(unit):
            return float(rate[:-len(unit)]) * scale
    raise ValueError(f"--rates {rate}: expected e.g. 10gbit or 1gbit")


def link_gbps(records: list) -> float:
    """The link rate in GB/s (bytes), from the machine's tbf rate."""
    return parse_rate(records[0].machine["link"]) / 8e9


def roof_gbps(records: list) -> float:
    """The machine's roof in GB/s: every host streaming to the next at once
    (median per host over the reps), where it is below the link rate."""
    rings = records[0].machine.get("ring_stream_gbit", [])
    return min(link_gbps(records), median(rings) / 8) if rings else link_gbps(records)


def fmt_time(us: float) -> str:
    if us >= 10000:
        return f"{us / 1000:.0f} ms"
    if us >= 1000:
        return f"{us / 1000:.1f} ms"
    return f"{us:.0f} us" if us >= 10 else f"{us:.1f} us"


def fastest_peer(row: dict) -> tuple:
    """(label, median time) of the fastest peer in {label: Record}."""
    peers = {lab: median(r.time_us) for lab, r in row.items() if lab != "collie"}
    best = min(peers, key=peers.get)
    return best, peers[best]


def table(records: list, collectives: list) -> list:
    link, roof = link_gbps(records), roof_gbps(records)
    by = {}
    for r in records:
        by.setdefault((r.collective, r.bytes), {})[r.label] = r
    labels = [lab for lab in ORDER if any(r.label == lab for r in records)]
    head = ["collective", "size"] if len(collectives) > 1 else ["size"]
    lines = ["| " + " | ".join(head + labels + ["collie busbw / link", "/ roof",
                                                 "collie over fastest peer"]) + " |",
             "|" + "---|" * len(head) + "---:|" * (len(labels) + 3)]
    for c in collectives:
        for size in sorted(b for (cc, b) in by if cc == c):
            row = by[(c, size)]
            cells = [fmt_time(median(row[lab].time_us)) if lab in row else "-" for lab in labels]
            collie = row.get("collie")
            bw = [f"{median(collie.busbw_gbps) / x:.2f}" if collie and collie.busbw_gbps else "-"
                  for x in (link, roof)]
            ratio = "-"
            if collie and len(row) > 1:
                best, t = fastest_peer(row)
                ratio = f"{t / median(collie.time_us):.2f}x ({best})"
            first = [c, human_bytes(size)] if len(collectives) > 1 else [human_bytes(size)]
            lines.append("| " + " | ".join(first + cells + bw + [ratio]) + " |")
    return lines


def caption(rate: str, records: list) -> str:
    m = records[0].machine
    streams, rings = m.get("link_stream_gbit", []), m.get("ring_stream_gbit", [])
    stream = (f"; one TCP stream across it: {median(streams):.2f} Gbit/s" if streams else "")
    if rings:
        stream += (f"; every host streaming to the next at once: {median(rings):.2f} Gbit/s "
                   f"each, so the roof is {roof_gbps(records):.3g} GB/s")
    return (f"**{rate}**: {m.get('hosts')} hosts x {m.get('ranks_per_host')} ranks, "
            f"each host's link shaped to {rate} both ways ({link_gbps(records):.3g} GB/s){stream}. "
            f"Medians of {reps_text(r.reps for r in records)}; "
            f"{bench_results.describe_machine(m)}.")


def render(results: dict) -> str:
    out = []
    for rate, records in results.items():
        if not records:
            continue
        out += [caption(rate, records), ""]
        out += table(records, ["all_reduce"]) + [""]
        others = [c for c in ("broadcast", "all_gather", "reduce_scatter")
                  if any(r.collective == c for r in records)]
        if others:
            out += table(records, others) + [""]
    return "\n".join(out).rstrip()


SHORT = {"Gloo ring": "Gloo ring", "Gloo HD": "Gloo HD", "Open MPI vader+TCP": "Open MPI",
         "torch gloo": "torch gloo"}


def summary(results: dict) -> str:
    """docs/performance.md's tables: all_reduce at every size and the other
    collectives at three, each rate side by side: collie's time, the fastest
    peer's, collie over it, and collie's busbw / link and / roof."""
    rates = [r for r in results if results[r]]
    by = {rate: {(r.collective, r.bytes): {} for r in results[rate]} for rate in rates}
    for rate in rates:
        for r in results[rate]:
            by[rate][(r.collective, r.bytes)][r.label] = r
    head = ["size"]
    for rate in rates:
        head += [f"{rate}: collie", "fastest peer", "collie over it", "busbw / link", "/ roof"]
    out = []
    for collectives, sizes in ((["all_reduce"], None),
                               (["broadcast", "all_gather", "reduce_scatter"],
                                {1 << 10, 256 << 10, 64 << 20})):
        lead = ["collective"] if len(collectives) > 1 else []
        out += ["| " + " | ".join(lead + head) + " |",
                "|" + "---|" * (len(lead) + 1) + "---:|" * (len(head) - 1)]
        for c in collectives:
            keys = sorted({b for rate in rates for (cc, b) in by[rate] if cc == c})
            for size in keys:
                if sizes and size not in sizes:
                    continue
                cells = lead and [c]
                cells = (cells or []) + [human_bytes(size)]
                for rate in rates:
                    row = by[rate].get((c, size), {})
                    collie = row.get("collie")
                    if not collie or len(row) < 2:
                        cells += ["-"] * 5
                        continue
                    best, t = fastest_peer(row)
                    ct = median(collie.time_us)
                    link, roof = link_gbps(results[rate]), roof_gbps(results[rate])
                    bw = median(collie.busbw_gbps)
                    cells += [fmt_time(ct), f"{fmt_time(t)} ({SHORT.get(best, best)})",
                              f"{t / ct:.2f}x", f"{bw / link:.2f}", f"{bw / roof:.2f}"]
                out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out).rstrip()


def plot(results: dict, path: str) -> str:
    panels = []
    for rate, records in results.items():
        rows = [r for r in records if r.collective == "all_reduce"]
        if not rows:
            continue
        link = link_gbps(rows)
        labs = {}
        for r in rows:
            labs.setdefault(r.label, {})[r.bytes] = r
        frac, time = [], []
        for lab in [x for x in ORDER if x in labs]:
            pts = sorted(labs[lab].items())
            frac.append(Series(lab, [(b, median(r.busbw_gbps) / link) for b, r in pts],
                               low=[min(r.busbw_gbps) / link for _, r in pts],
                               high=[max(r.busbw_gbps) / link for _, r in pts]))
            time.append(Series(lab, [(b, median(r.time_us)) for b, r in pts],
                               low=[min(r.time_us) for _, r in pts],
                               high=[max(r.time_us) for _, r in pts]))
        xs = sorted({r.bytes for r in rows})
        frac.append(Series("link rate", [(xs[0], 1.0), (xs[-1], 1.0)], dash="6,4"))
        roof = roof_gbps(rows) / link
        if roof < 0.99:
            frac.append(Series("every host streaming at once", [(xs[0], roof), (xs[-1], roof)],
                               dash="2,3"))
        panels.append(LogLogPanel(f"all_reduce busbw / link, {rate}", "message size",
                                  "busbw / link rate (median, min-max)", frac,
                                  x_format=human_bytes))
        panels.append(LogLogPanel(f"all_reduce time per call, {rate}", "message size",
                                  "us per call (median, min-max)", time, x_format=human_bytes))
    first = next(iter(results.values()))
    m = first[0].machine
    write_chart(path, f"all_reduce across {m.get('hosts')} hosts x {m.get('ranks_per_host')} "
                f"ranks (network namespaces, tc tbf links)", panels,
                note=f"lines: medians of {reps_text(r.reps for r in first)}, bands: min-max; "
                     f"{m.get('cpu')}, {m.get('cores')} cores, {m.get('start')}")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("inputs", nargs="+", help="OUT/<rate> directories or their results.json")
    ap.add_argument("--md", help="write the tables here too")
    ap.add_argument("--svg", help="write the plot here")
    ap.add_argument("--summary", action="store_true",
                    help="print docs/performance.md's two tables (every rate side by side) "
                         "instead of one table per rate")
    args = ap.parse_args()
    results = {}
    for p in args.inputs:
        records, _ = bench_results.load(p)
        if records:
            results.setdefault(records[0].machine.get("link", p), []).extend(records)
    text = summary(results) if args.summary else render(results)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    if args.svg:
        print(plot(results, args.svg), file=sys.stderr)


if __name__ == "__main__":
    main()
