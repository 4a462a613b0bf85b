"""The charts of bench/compare and bench/multihost, drawn by matplotlib (Agg,
no display; Debian: python3-matplotlib). The scripts describe what to draw
with three small records, and write_chart() lays the panels out side by
side with one shared legend under them:

    from charts import Series, LogLogPanel, BarPanel, write_chart
    write_chart("out.svg", "title", [
        LogLogPanel("N = 2", "message size", "us per call", [
            Series("collie", [(4, 12.0), (16, 12.5)], low=[...], high=[...]),
            Series("gloo", [(4, 80.0), (16, 85.0)]),
            Series("T/N", [(4, 1.5), (16, 1.5)], dash="6,4"),  # a reference line
        ], x_format=human_bytes),
        BarPanel("DDP", "samples/s", ["2 ranks", "4 ranks"], {"collie": [1757, 1783], ...}),
    ], note="lines: medians")

A LogLogPanel draws each series as a line through its medians with markers
and an optional shaded band between `low` and `high` (the min and max over
runs), or as a dashed line without markers (`dash`, on/off lengths in
points); both axes are logarithmic, the x ticks at the first series' x
values (at most five labelled). A BarPanel draws grouped bars with their
values, and error bars where low/high are given. The file's format follows
its extension (.svg, .png, .pdf); an SVG keeps its text as text, and the
same input gives the same bytes (no date, fixed element ids).
"""
from __future__ import annotations

import math
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Callable

try:
    import matplotlib
except ImportError as e:  # a venv without system site packages, say
    raise ImportError(f"bench/compare/charts.py needs matplotlib, which {sys.executable} lacks: "
                      "install the Debian package python3-matplotlib and run the script with "
                      "/usr/bin/python3") from e

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: a small, greppable SVG
matplotlib.rcParams["svg.hashsalt"] = "collie"  # element ids do not change between runs
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator  # noqa: E402

PANEL_W, PANEL_H = 4.6, 3.6  # inches, one panel


@dataclass
class Series:
    name: str
    points: list  # [(x, y)]
    low: list | None = None  # one per point: the band's lower edge
    high: list | None = None
    dash: str | None = None  # "6,4": a reference line, dashed, no markers


@dataclass
class LogLogPanel:
    title: str
    x_label: str
    y_label: str
    series: list
    x_format: Callable = str

    def names(self) -> list:
        return [s.name for s in self.series]

    def draw(self, ax, colors: dict) -> None:
        for s in self.series:
            xs = [x for x, _ in s.points]
            ys = [y for _, y in s.points]
            if s.low and s.high:
                ax.fill_between(xs, s.low, s.high, color=colors[s.name], alpha=0.15, linewidth=0)
            if s.dash:
                on_off = [float(v) for v in s.dash.split(",")]
                ax.plot(xs, ys, color=colors[s.name], linewidth=1.5, dashes=on_off)
            else:
                ax.plot(xs, ys, color=colors[s.name], linewidth=2, marker="o", markersize=3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = [x for x, _ in self.series[0].points] if self.series else []
        if ticks:
            step = max(1, math.ceil((len(ticks) - 1) / 4))  # at most 5 labels
            ax.xaxis.set_major_locator(FixedLocator(ticks[::step]))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: self.x_format(int(x))))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="major", axis="y", color="#ddd")
        ax.set_title(self.title, fontsize=11, fontweight="bold")
        ax.set_xlabel(self.x_label)
        ax.set_ylabel(self.y_label)


@dataclass
class BarPanel:
    title: str
    y_label: str
    groups: list  # one label per group of bars
    values: dict  # {series name: [one value per group]}
    low: dict = field(default_factory=dict)  # likewise: the error bars' ends
    high: dict = field(default_factory=dict)

    def names(self) -> list:
        return list(self.values)

    def draw(self, ax, colors: dict) -> None:
        width = 0.7 / max(1, len(self.values))
        for i, (name, vals) in enumerate(self.values.items()):
            xs = [g - 0.35 + (i + 0.5) * width for g in range(len(self.groups))]
            err = None
            if name in self.low and name in self.high:
                err = [[v - lo for v, lo in zip(vals, self.low[name])],
                       [hi - v for v, hi in zip(vals, self.high[name])]]
            bars = ax.bar(xs, vals, width * 0.95, color=colors[name], yerr=err, capsize=2)
            # Inside the bars, clear of the error bars above them.
            ax.bar_label(bars, labels=[f"{v:.0f}" for v in vals], label_type="center",
                         fontsize=7, color="white")
        ax.set_xticks(range(len(self.groups)), self.groups)
        ax.grid(True, axis="y", color="#ddd")
        ax.set_axisbelow(True)
        ax.set_title(self.title, fontsize=11, fontweight="bold")
        ax.set_ylabel(self.y_label)


def write_chart(path: str, title: str, panels: list, note: str = "") -> str:
    """Draws `panels` side by side into `path` (format from its extension);
    returns the path."""
    names = []
    for p in panels:
        names += [n for n in p.names() if n not in names]
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {n: cycle[i % len(cycle)] for i, n in enumerate(names)}
    n = max(1, len(panels))
    fig, axes = plt.subplots(1, n, squeeze=False, figsize=(PANEL_W * n, PANEL_H))
    for panel, ax in zip(panels, axes[0]):
        panel.draw(ax, colors)
    fig.suptitle(title, fontweight="bold")
    fig.tight_layout()
    # The legend and the note hang below the panels; savefig's tight
    # bounding box takes them in.
    per_row = max(1, int(PANEL_W * n * 72 / 150))  # about 150 points an entry
    dashes = {s.name: s.dash for p in panels if isinstance(p, LogLogPanel) for s in p.series}
    handles = [Line2D([], [], color=colors[name], linewidth=2, label=name,
                      dashes=[float(v) for v in dashes[name].split(",")])
               if dashes.get(name) else matplotlib.patches.Patch(color=colors[name], label=name)
               for name in names]
    legend = fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                        ncol=min(max(1, len(names)), per_row), frameon=False, fontsize=9)
    if note:
        fig.canvas.draw()  # the legend's size is known once drawn
        bottom = legend.get_window_extent().transformed(fig.transFigure.inverted()).y0
        width = int(PANEL_W * n * 72 / 5.5)  # characters of about 5.5 points at size 8
        fig.text(0.01, bottom - 0.01, "\n".join(textwrap.wrap(note, width)), fontsize=8,
                 va="top", ha="left", color="#333")
    fig.savefig(path, bbox_inches="tight", pad_inches=0.15,
                metadata={"Date": None} if path.endswith(".svg") else None)
    plt.close(fig)
    return path
