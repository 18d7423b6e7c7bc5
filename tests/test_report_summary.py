"""summary: percentiles printed with n; low-n p99 marked."""

from __future__ import annotations

from rich.console import Console

from duplexctl.report.histogram import HistogramSet, LatencyHistogram
from duplexctl.report.summary import format_percentiles, format_value, histogram_table


def hist_of(values: list[float]) -> LatencyHistogram:
    h = LatencyHistogram()
    h.record_many(values)
    return h


def test_format_percentiles_marks_low_n_p99() -> None:
    h = hist_of([300.0] * 20 + [312.0] * 10 + [340.0] * 10 + [351.0] * 2)
    text = format_percentiles(h)
    assert text == "p50 312 · p95 340 · p99 351* (n=42)"


def test_format_percentiles_large_n_unmarked_and_units() -> None:
    h = hist_of([float(i) for i in range(1, 1001)])
    text = format_percentiles(h, (50, 99), unit="ms")
    assert text == "p50 500ms · p99 990ms (n=1000)"
    assert "*" not in text


def test_format_percentiles_empty() -> None:
    assert format_percentiles(LatencyHistogram()) == "n=0"


def test_format_value_significant_figures() -> None:
    assert [format_value(v) for v in (312.4, 31.24, 3.124, 0.3124, 0.0, -12.5, None)] == [
        "312",
        "31.2",
        "3.12",
        "0.312",
        "0",
        "-12.5",
        "–",
    ]


def test_histogram_table_rows_and_caption() -> None:
    hs = HistogramSet()
    for v in range(10):
        hs.record("ttfa_ms", 100.0 + v)
    for v in range(200):
        hs.record("turn_ms", 1000.0 + v)
    table = histogram_table(hs, metrics=["turn_ms", "ttfa_ms", "absent_ms"], title="latency")
    assert table.row_count == 2
    assert table.caption is not None and "fewer than 100" in table.caption
    console = Console(width=120, record=True)
    console.print(table)
    out = console.export_text()
    assert "turn_ms" in out and "ttfa_ms" in out and "*" in out
    unmarked = HistogramSet()
    unmarked.histogram("turn_ms").merge(hs["turn_ms"])
    assert histogram_table(unmarked).caption is None
