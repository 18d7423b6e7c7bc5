"""Human-readable summaries of histograms (docs/metrics.md "Statistics").

Every percentile is printed with its ``n``, and a p99 computed from fewer than 100 samples is
marked ``*``: with 42 samples "p99" is simply the largest one, and a reader comparing two runs
must see that before trusting the tail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from duplexctl.report.histogram import P99_MIN_N, HistogramSet, LatencyHistogram

if TYPE_CHECKING:
    from rich.table import Table

LOW_N_MARK = "*"
LOW_N_NOTE = f"{LOW_N_MARK} p99 from fewer than {P99_MIN_N} samples"
SEP = " · "


def format_value(value: float | None) -> str:
    """About three significant figures, no exponent: 312, 31.2, 3.12, 0.312; '–' for none."""
    if value is None:
        return "–"
    magnitude = abs(value)
    if magnitude >= 100 or value == 0:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def format_percentiles(
    hist: LatencyHistogram,
    percentiles: Sequence[float] = (50, 95, 99),
    unit: str = "",
) -> str:
    """``"p50 312 · p95 340 · p99 351* (n=42)"``; ``"n=0"`` when empty.

    ``unit`` (e.g. ``"ms"``) is appended to each value when given.
    """
    n = hist.count
    if n == 0:
        return "n=0"
    values = hist.percentiles(percentiles)
    parts = []
    for p in percentiles:
        text = format_value(values[float(p)]) + unit
        if float(p) == 99.0 and n < P99_MIN_N:
            text += LOW_N_MARK
        parts.append(f"p{p:g} {text}")
    return f"{SEP.join(parts)} (n={n})"


def histogram_table(
    histograms: HistogramSet,
    *,
    metrics: Sequence[str] | None = None,
    title: str | None = None,
) -> Table:
    """A rich Table: one row per metric, n then p50/p90/p95/p99/max/mean/min.

    ``metrics`` picks and orders the rows (missing ones are skipped); default: all, in
    insertion order. The caption explains the ``*`` when any row carries it.
    """
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric", style="bold")
    for heading in ("n", "p50", "p90", "p95", "p99", "max", "mean", "min"):
        table.add_column(heading, justify="right")
    marked = False
    for name in metrics if metrics is not None else histograms.names():
        hist = histograms.get(name)
        if hist is None:
            continue
        summary = hist.to_dict()
        p99 = format_value(summary["p99"])
        if summary["n"] and summary["p99_low_n"]:
            p99 += LOW_N_MARK
            marked = True
        table.add_row(
            name,
            str(summary["n"]),
            format_value(summary["p50"]),
            format_value(summary["p90"]),
            format_value(summary["p95"]),
            p99,
            format_value(summary["max"]),
            format_value(summary["mean"]),
            format_value(summary["min"]),
        )
    if marked:
        table.caption = LOW_N_NOTE
    return table
