#!/usr/bin/env python3
"""One training step of a collie timeline as a picture: every rank's rows
(the step, DDP's forward / backward / wait, each bucket's all_reduce, the
group's collectives) on rank 0's clock, to show backward overlapping the
buckets' all_reduces (docs/troubleshooting.md, "A timeline of a step").

    build/bin/collie-run --standalone --nproc-per-node 2 build/bin/blip_train \\
        --synthetic --epochs 1 --max-steps 6 --hidden 2048 2048 --trace /tmp/trace.json
    tools/plot_timeline.py /tmp/trace.json docs/images/timeline_step.svg --step 4

Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: a small SVG
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"forward": "#4e79a7", "backward": "#f28e2b", "wait for all_reduces": "#bab0ac",
          "bucket": "#59a14f", "collective": "#b07aa1", "step": "#76b7b2"}


def color_of(event):
    name = event["name"]
    if event.get("cat") == "collective":
        return COLORS["collective"]
    if name.startswith("bucket "):
        return COLORS["bucket"]
    if name.startswith("step "):
        return COLORS["step"]
    return COLORS.get(name, "#9c755f")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("out", help="the picture (.svg or .png)")
    p.add_argument("--step", type=int, default=None, help="which step (default: the last one)")
    p.add_argument("--title", default=None)
    args = p.parse_args()

    trace = json.load(open(args.trace))
    tracks, order, spans = {}, {}, []
    for e in trace["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name":
            tracks[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_sort_index":
            order[(e["pid"], e["tid"])] = e["args"]["sort_index"]
        elif e["ph"] == "X":
            spans.append(e)
    steps = [e for e in spans if e.get("cat") == "step"]
    if not steps:
        raise SystemExit(f"{args.trace}: no step spans")
    wanted = args.step if args.step is not None else max(s["args"].get("step", 0) for s in steps)
    chosen = {s["pid"]: s for s in steps if s["args"].get("step") == wanted}
    ranks = sorted(chosen)
    t0 = min(s["ts"] for s in chosen.values())
    t1 = max(s["ts"] + s["dur"] for s in chosen.values())

    # Rows: per rank, its tracks in the trace's order, those with a span in the step.
    rows, labels = [], []
    for rank in ranks:
        tids = sorted((tid for pid, tid in tracks if pid == rank),
                      key=lambda tid: (order.get((rank, tid), tid), tid))
        for tid in tids:
            name = tracks[(rank, tid)]
            inside = [e for e in spans if e["pid"] == rank and e["tid"] == tid
                      and e["ts"] + e["dur"] >= t0 and e["ts"] <= t1]
            if inside:
                rows.append(inside)
                labels.append(f"rank {rank}  {name}")

    fig, ax = plt.subplots(figsize=(11, 0.42 * len(rows) + 1.6))
    for y, row in enumerate(rows):
        for e in row:
            start = (max(e["ts"], t0) - t0) / 1000.0
            end = (min(e["ts"] + e["dur"], t1) - t0) / 1000.0
            ax.broken_barh([(start, max(end - start, 0.01))], (y - 0.38, 0.76),
                           facecolors=color_of(e), edgecolor="white", linewidth=0.5)
            text = e["name"]
            if e.get("cat") == "collective":
                text = f"{e['args'].get('bytes', 0) / 1e6:.1f} MB"
            elif text.startswith("bucket "):
                text = text.split(" all_reduce")[0]
            if end - start > 0.05 * (t1 - t0) / 1000.0:
                ax.text((start + end) / 2, y, text, ha="center", va="center", fontsize=7,
                        color="white" if color_of(e) != COLORS["wait for all_reduces"] else "black")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, (t1 - t0) / 1000.0)
    ax.set_xlabel("ms since the step began (rank 0's clock)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(args.title or f"step {wanted}: backward and the buckets' all_reduces", fontsize=10)
    legend = [("forward", COLORS["forward"]), ("backward", COLORS["backward"]),
              ("wait for all_reduces", COLORS["wait for all_reduces"]),
              ("bucket: launch to all_reduce done", COLORS["bucket"]),
              ("the group's all_reduce", COLORS["collective"])]
    ax.legend(handles=[matplotlib.patches.Patch(color=c, label=n) for n, c in legend],
              loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=5, fontsize=7, frameon=False)
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}: step {wanted} of ranks {ranks}, {(t1 - t0) / 1000.0:.2f} ms")


if __name__ == "__main__":
    main()
