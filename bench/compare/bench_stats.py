"""Statistics and number formats shared by every bench/compare script.

One place for: the median and the min-max of repeated measurements, the one
"median (min-max)" formatter, message sizes in words (4 B, 64 KiB, 16 MiB),
and the one ratio every table prints:

    speed-up of collie over a peer = the peer's time / collie's time
                                   (= collie's busbw or rate / the peer's)

above 1, collie is faster. Standard library only; imported, not run:

    from bench_stats import fmt_span, speedup, fmt_speedup, speedup_header
"""
from __future__ import annotations

import statistics
from typing import Callable, Iterable, Optional, Sequence

SPEEDUP_RULE = ("speed-up of collie over a peer = the peer's time / collie's time "
                "(medians; for rates, collie's / the peer's): above 1, collie is faster")


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def spread(values: Iterable[float]) -> tuple[float, float, float]:
    """(median, min, max) of the values."""
    values = list(values)
    return statistics.median(values), min(values), max(values)


def fmt_us(t: float) -> str:
    """A time in us: two decimals below 10 us, where runs differ by hundredths."""
    return f"{t:.2f}" if t < 10 else f"{t:.1f}"


def fixed(digits: int) -> Callable[[float], str]:
    """A formatter with a fixed number of decimals."""
    return lambda v: f"{v:.{digits}f}"


def fmt_span(values: Sequence[float], fmt: Optional[Callable[[float], str]] = None) -> str:
    """"median (min-max)" of the values; the value alone when there is one,
    "-" when there is none. fmt formats each number (default: fmt_us, with
    the decimals that suit the median)."""
    values = list(values)
    if not values:
        return "-"
    med, lo, hi = spread(values)
    if fmt is None:
        digits = 2 if med < 10 else 1
        fmt = fixed(digits)
    if len(values) == 1:
        return fmt(med)
    return f"{fmt(med)} ({fmt(lo)}-{fmt(hi)})"


def speedup(peer_times: Sequence[float], collie_times: Sequence[float]) -> Optional[float]:
    """Speed-up of collie over the peer from two sets of times: the ratio of
    the medians, peer / collie; None where either is missing."""
    if not peer_times or not collie_times:
        return None
    c = median(collie_times)
    return median(peer_times) / c if c > 0 else None


def rate_speedup(collie_rates: Sequence[float], peer_rates: Sequence[float]) -> Optional[float]:
    """Speed-up of collie over the peer from rates (samples/s, GB/s): collie / peer."""
    if not peer_rates or not collie_rates:
        return None
    p = median(peer_rates)
    return median(collie_rates) / p if p > 0 else None


def fmt_speedup(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}x"


def speedup_header(peer: str, collie: str = "collie") -> str:
    """The one column title for the ratio, in every table."""
    return f"speed-up of {collie} over {peer}"


def reps_text(counts: Iterable[int]) -> str:
    """"1 rep", "5 reps", "3/5 reps" for the distinct rep counts of a table."""
    counts = sorted(set(counts))
    return f"{'/'.join(str(c) for c in counts)} rep{'' if counts == [1] else 's'}"


def human_bytes(n: int) -> str:
    """4 B, 64 KiB, 16 MiB, 1 GiB (a unit only where the size is a whole number of it)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def parse_bytes(text: str) -> int:
    """"4", "64K", "256M", "1G" (binary units) as bytes; for command-line flags."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)
