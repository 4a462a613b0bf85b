#!/usr/bin/env python3
"""Medians over several run_compare.sh runs.

One run of run_compare.sh on a small shared VM is one noisy sample: the same
size can differ 2-3x between two runs a minute apart, and T (one loopback
stream, the yardstick of the busbw goal) moved between 3.2 and 5.3 GB/s in
six back-to-back runs. This reads the results.md of each run directory and
prints, per world size and message size, the median (min-max) time of each
library, collie's busbw / (T/N) with T from the same run, and in how many
runs collie was the fastest of all.

    for i in 1 2 3 4 5 6; do bench/compare/run_compare.sh build out/run$i; done
    bench/compare/aggregate_runs.py out/run*
"""
import re
import statistics
import sys

def parse(path):
    """T, {(N, size): {library: (us, busbw)}}, sizes in order, libraries in order."""
    text = open(f"{path}/results.md").read()
    t = float(re.search(r"= ([\d.]+) GB/s, memcpy", text).group(1))
    rows = {}
    sizes, libraries = [], []
    for block in re.split(r"^#+ N = ", text, flags=re.M)[1:]:
        n = int(block.split()[0])
        names = []
        for line in block.splitlines():
            if not line.startswith("| "):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] == "size":
                # "<library> us / busbw" columns, then the ratio columns.
                names = [c[: -len(" us / busbw")] for c in cells[1:] if c.endswith(" us / busbw")]
                libraries += [x for x in names if x not in libraries]
                continue
            size = cells[0]
            if size not in sizes:
                sizes.append(size)
            rows[(n, size)] = {
                name: tuple(float(x) for x in cell.split("/"))
                for name, cell in zip(names, cells[1 : 1 + len(names)])
                if cell != "-"
            }
    return t, rows, sizes, libraries


def span(values, fmt):
    if not values:
        return "-"
    if fmt == "us":  # two decimals below 10 us, where the runs differ by hundredths
        fmt = "{:.2f}" if statistics.median(values) < 10 else "{:.1f}"
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main(dirs):
    if not dirs:
        sys.exit(__doc__)
    runs = [parse(d) for d in dirs]
    worlds = sorted({n for _, rows, _, _ in runs for (n, _) in rows})
    sizes = runs[0][2]
    libraries = []
    for run in runs:
        libraries += [x for x in run[3] if x not in libraries]
    # "collie fastest" counts against the peers, not collie's other transport.
    peers = [x for x in libraries if not x.startswith("collie")]
    print("T per run (GB/s): " + ", ".join(f"{t:.2f}" for t, _, _, _ in runs))
    for n in worlds:
        print(f"\n#### N = {n}: median (min-max) over {len(runs)} runs\n")
        print("| size | " + " | ".join(f"{p} us" for p in libraries) +
              " | collie busbw / (T/N) | collie fastest |")
        print("|---" * (len(libraries) + 3) + "|")
        for size in sizes:
            present = [(t, rows[(n, size)]) for t, rows, _, _ in runs if (n, size) in rows]
            if not present:
                continue
            cells = [size]
            for lib in libraries:
                cells.append(span([row[lib][0] for _, row in present if lib in row], "us"))
            ratios = [row["collie"][1] / (t / n) for t, row in present if "collie" in row]
            cells.append(span(ratios, "{:.2f}") if size.endswith("MiB") else "")
            wins = sum(1 for _, row in present if "collie" in row and
                       all(row["collie"][0] <= row[p][0] for p in peers if p in row))
            cells.append(f"{wins}/{len(present)}")
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
