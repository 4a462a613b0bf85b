"""A small SVG chart writer, the one plotting path of bench/compare (Python's
standard library only: matplotlib is not installed here, and SVG shows in
Markdown as it is). plot_results.py draws every results file with it.

    from svg_plot import Series, LogLogPanel, BarPanel, write_svg
    write_svg("out.svg", "title", [
        LogLogPanel("N = 2", "message size", "us per call", [
            Series("collie", [(4, 12.0), (16, 12.5)], low=[...], high=[...]),
            Series("gloo", [(4, 80.0), (16, 85.0)]),
            Series("T/N", [(4, 1.5), (16, 1.5)], dash="6,4"),  # a reference line
        ], x_format=human_bytes),
        BarPanel("DDP", "samples/s", ["2 ranks", "4 ranks"], {"collie": [1757, 1783], ...}),
    ])

A LogLogPanel draws each series as a line through its medians with an
optional shaded band between `low` and `high` (e.g. the min and max over
runs), or as a dashed line without markers (`dash`); axes are logarithmic,
with a tick at each power of ten (y) and at each x value of the first series.
A BarPanel draws grouped bars. Panels are laid out side by side with one
shared legend, wrapped into rows where it is wider than they are.
"""
import math
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#7f7f7f",
          "#e377c2", "#17becf", "#bcbd22"]
PANEL_W, PANEL_H = 420, 320
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 70, 20, 40, 60


class Series:
    def __init__(self, name, points, low=None, high=None, dash=None):
        self.name, self.points = name, list(points)
        self.low, self.high, self.dash = low, high, dash


def _compact(v):
    """1, 10, 100, 1k, 10k, 100k, 1M, ... (and 0.1, 0.01 below 1)."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:g}{unit}"
    return f"{v:g}"


def _text(x, y, s, size=12, anchor="middle", rotate=None, weight="normal"):
    transform = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-weight="{weight}"{transform}>{escape(str(s))}</text>')


def _line(x1, y1, x2, y2, color="#000", width=1, dash=None):
    d = f' stroke-dasharray="{dash}"' if dash else ""
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
            f'stroke-width="{width}"{d}/>')


def _frame(title, x_label, y_label):
    """The plot area's corners and the panel's title and axis labels."""
    left, top = MARGIN_L, MARGIN_T
    right, bottom = PANEL_W - MARGIN_R, PANEL_H - MARGIN_B
    parts = [f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" '
             'fill="none" stroke="#000"/>',
             _text((left + right) / 2, 22, title, 14, weight="bold"),
             _text((left + right) / 2, PANEL_H - 12, x_label),
             _text(16, (top + bottom) / 2, y_label, rotate=-90)]
    return (left, top, right, bottom), parts


class LogLogPanel:
    def __init__(self, title, x_label, y_label, series, x_format=str):
        self.title, self.x_label, self.y_label = title, x_label, y_label
        self.series, self.x_format = series, x_format

    def draw(self, colors):
        (left, top, right, bottom), parts = _frame(self.title, self.x_label, self.y_label)
        xs = [x for s in self.series for x, _ in s.points]
        ys = [y for s in self.series for _, y in s.points]
        ys += [y for s in self.series for y in (s.low or []) + (s.high or [])]
        x0, x1 = math.log10(min(xs)), math.log10(max(xs))
        y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
        x1 = x1 if x1 > x0 else x0 + 1
        y1 = y1 if y1 > y0 else y0 + 1

        def px(x):
            return left + (math.log10(x) - x0) / (x1 - x0) * (right - left)

        def py(y):
            return bottom - (math.log10(y) - y0) / (y1 - y0) * (bottom - top)

        for e in range(y0, y1 + 1):
            y = py(10 ** e)
            parts.append(_line(left, y, right, y, "#ddd"))
            parts.append(_text(left - 6, y + 4, _compact(10 ** e), 11, anchor="end"))
        ticks = [x for x, _ in self.series[0].points]
        step = max(1, math.ceil((len(ticks) - 1) / 4))  # at most 5 labels
        for x in ticks[::step]:
            parts.append(_line(px(x), bottom, px(x), bottom + 4))
            parts.append(_text(px(x), bottom + 18, self.x_format(x), 11))
        for s in self.series:
            color = colors[s.name]
            if s.low and s.high:
                upper = [f"{px(x):.1f},{py(h):.1f}" for (x, _), h in zip(s.points, s.high)]
                lower = [f"{px(x):.1f},{py(lo):.1f}" for (x, _), lo in zip(s.points, s.low)]
                parts.append(f'<polygon points="{" ".join(upper + lower[::-1])}" fill="{color}" '
                             'fill-opacity="0.15" stroke="none"/>')
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s.points)
            dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                         f'stroke-width="2"{dash}/>')
            for x, y in [] if s.dash else s.points:
                parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        return parts


class BarPanel:
    def __init__(self, title, y_label, groups, values, low=None, high=None):
        """values: {series name: [one value per group]}; low/high likewise
        (drawn as error bars)."""
        self.title, self.y_label, self.groups = title, y_label, groups
        self.values, self.low, self.high = values, low or {}, high or {}

    def draw(self, colors):
        (left, top, right, bottom), parts = _frame(self.title, "", self.y_label)
        top_value = max(max(self.high.get(n, v)) for n, v in self.values.items()) * 1.1
        scale = 10 ** math.floor(math.log10(top_value))
        step = scale if top_value / scale > 3 else scale / 2

        def py(v):
            return bottom - v / top_value * (bottom - top)

        v = 0.0
        while v <= top_value:
            parts.append(_line(left, py(v), right, py(v), "#ddd"))
            parts.append(_text(left - 6, py(v) + 4, f"{v:g}", 11, anchor="end"))
            v += step
        group_w = (right - left) / len(self.groups)
        bar_w = group_w * 0.7 / len(self.values)
        for g, group in enumerate(self.groups):
            gx = left + g * group_w + group_w * 0.15
            parts.append(_text(left + (g + 0.5) * group_w, bottom + 18, group, 11))
            for i, (name, vals) in enumerate(self.values.items()):
                x = gx + i * bar_w
                parts.append(f'<rect x="{x:.1f}" y="{py(vals[g]):.1f}" width="{bar_w - 2:.1f}" '
                             f'height="{bottom - py(vals[g]):.1f}" fill="{colors[name]}"/>')
                parts.append(_text(x + bar_w / 2, py(vals[g]) - 4, f"{vals[g]:.0f}", 10))
                if name in self.low and name in self.high:
                    cx = x + bar_w / 2 - 1
                    parts.append(_line(cx, py(self.low[name][g]), cx, py(self.high[name][g]),
                                       "#000"))
        return parts

    def series_names(self):
        return list(self.values)


def _wrap(note, width):
    """The note in lines that fit the width (about 5.5 px a character),
    broken after "; "."""
    lines = [""]
    for part in note.split("; "):
        joined = f"{lines[-1]}; {part}" if lines[-1] else part
        if len(joined) * 5.5 > width - 40 and lines[-1]:
            lines[-1] += ";"
            lines.append(part)
        else:
            lines[-1] = joined
    return lines


def write_svg(path, title, panels, note=""):
    names = []
    for p in panels:
        for n in (p.series_names() if isinstance(p, BarPanel) else [s.name for s in p.series]):
            if n not in names:
                names.append(n)
    colors = {n: COLORS[i % len(COLORS)] for i, n in enumerate(names)}
    width = PANEL_W * len(panels)
    legend, x, y = [], 20, PANEL_H + 40
    for n in names:  # wrapped into rows that fit the width
        w = 30 + 8 * len(n)
        if x + w > width and x > 20:
            x, y = 20, y + 22
        legend.append(f'<rect x="{x}" y="{y}" width="14" height="14" fill="{colors[n]}"/>')
        legend.append(_text(x + 20, y + 12, n, 12, anchor="start"))
        x += w
    notes = _wrap(note, width) if note else []
    height = y + 26 + 18 * len(notes)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
           f'<rect width="{width}" height="{height}" fill="#fff"/>',
           _text(width / 2, 20, title, 15, weight="bold")]
    for i, panel in enumerate(panels):
        out.append(f'<g transform="translate({i * PANEL_W},30)">')
        out += panel.draw(colors)
        out.append("</g>")
    out += legend
    for i, line in enumerate(notes):
        out.append(_text(20, height - 10 - 18 * (len(notes) - 1 - i), line, 10, anchor="start"))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
