"""PNG plots of load runs (``duplexctl report --plot DIR``), drawn with matplotlib.

matplotlib is imported lazily, inside :func:`draw`, with the non-interactive ``Agg`` backend:
it is an optional dependency (``pip install duplexctl[plot]``), slow to import, and must
never try to open a window on a headless CI machine.

Axes say what the run did, not what the plotting library guessed: time runs from the start
to the end of the run (not to the end of the last slice), values from 0 (or below, for a
negative ttfa) to the highest one with some headroom, rates over [0, 1].

Plots:

* ``latency_over_time.png`` — ttfa p50/p95/p99 per time slice, with turns per slice;
  climbing latency or a burst of rejections during the run shows up here, not in a
  whole-run percentile.
* ``rejection_over_time.png`` — rejection rate per slice (attempts not admitted, whatever
  the cause, over attempts).
* ``server_over_time.png`` — the server's key series scraped from its ``/metrics`` (running
  and waiting requests, KV cache usage; docs/metrics.md "Server metrics") per time slice, on
  the latency plot's time axis, so a queue that grows shows up under the latency it causes.
* ``server_vs_concurrency.png`` — the same series per capacity step, against its level.
* ``latency_vs_concurrency.png`` / ``rejection_vs_concurrency.png`` — for a capacity
  search (each step's ttfa p95 and rejection rate against its offered level), or for several
  runs given together (each run's offered level from its config).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from duplexctl.errors import MissingDependency
from duplexctl.report.slices import run_span_s

#: Room above the highest value, as a fraction of the axis (the top point is not on the frame).
HEADROOM: Final = 1.15
#: A rate is a fraction of attempts: its axis is always all of it.
RATE_LIMITS: Final = (0.0, 1.0)


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise MissingDependency("plots need matplotlib: pip install 'duplexctl[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _level_points(
    report: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]
) -> list[tuple[float, float | None, float | None]]:
    """(offered level, ttfa p95, rejection rate) per capacity step, or per run."""
    cap = report.get("capacity_search")
    if cap and cap.get("steps"):
        steps = sorted(cap["steps"], key=lambda s: s["level"])  # by level, never run order
        return [(s["level"], s.get("ttfa_p95"), s.get("rejection_rate")) for s in steps]
    points = []
    for run in runs:
        cfg = run.get("config", {})
        level = cfg.get("sessions") or cfg.get("rate")
        if level is None:
            continue
        ttfa = run.get("figures", {}).get("ttfa_ms", {})
        points.append(
            (float(level), ttfa.get("p95"), run.get("admission", {}).get("rejection_rate"))
        )
    return sorted(points)


def value_limits(values: Sequence[float | None]) -> tuple[float, float]:
    """Y limits from 0 (or the lowest value, if negative: an early start is signed) to the
    highest value plus :data:`HEADROOM`: a 1 ms difference between 504 and 505 ms stays a
    flat line instead of a cliff across the whole plot."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    low = min([0.0, *finite])
    high = max([0.0, *finite])
    if high <= low:
        return low, low + 1.0
    return low, high + (high - low) * (HEADROOM - 1.0)


def _time_axis(ax: Any, span: float) -> None:
    ax.set_xlim(0.0, span)
    ax.set_xlabel("time since start (s)")


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def draw(
    report: Mapping[str, Any], directory: Path, *, runs: Sequence[Mapping[str, Any]] = ()
) -> list[Path]:
    """Write the PNGs that the report has data for; returns their paths."""
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    span = run_span_s(report)
    # slices within the run, cut at its end (the last one is usually partly filled)
    slices = [s for s in report.get("slices", []) if s["start_s"] < span]
    if slices:
        starts = [float(s["start_s"]) for s in slices]
        ends = [min(float(s["end_s"]), span) for s in slices]
        t = [(a + b) / 2 for a, b in zip(starts, ends, strict=True)]
        fig, ax = plt.subplots(figsize=(8, 4.5))
        shown: list[float | None] = []
        for p, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
            ys = [s["figures"].get("ttfa_ms", {}).get(p) for s in slices]
            shown.extend(ys)
            ax.plot(t, [y if y is not None else float("nan") for y in ys], style, label=f"ttfa {p}")
        _time_axis(ax, span)
        ax.set_ylim(*value_limits(shown))
        ax.set_ylabel("ttfa (ms)")
        ax.set_title("turn latency over time")
        ax2 = ax.twinx()
        turns = [s["turns"] for s in slices]
        widths = [0.8 * (b - a) for a, b in zip(starts, ends, strict=True)]
        ax2.bar(t, turns, width=widths, alpha=0.15, color="grey")
        ax2.set_ylim(*value_limits(turns))
        ax2.set_ylabel("turns per slice")
        ax.legend(loc="upper left")
        written.append(_save(plt, fig, directory / "latency_over_time.png"))

        fig, ax = plt.subplots(figsize=(8, 3.5))
        rates = [s.get("rejection_rate") for s in slices]
        ax.plot(t, [r if r is not None else float("nan") for r in rates], "o-", clip_on=False)
        _time_axis(ax, span)
        ax.set_ylim(*RATE_LIMITS)
        ax.set_ylabel("rejection rate")
        ax.set_title("attempts not admitted over time")
        written.append(_save(plt, fig, directory / "rejection_over_time.png"))

    server = report.get("server_metrics") or {}
    server_slices = [s for s in server.get("slices", []) if s["start_s"] < span and s["key"]]
    if server_slices:
        t = [(s["start_s"] + min(s["end_s"], span)) / 2 for s in server_slices]
        written.append(
            _server_plot(plt, t, [s["key"] for s in server_slices], directory, time_span=span)
        )
    steps = [s for s in server.get("steps", []) if s["key"]]
    if steps:
        order = sorted(steps, key=lambda s: float(s["label"]))
        unit = (report.get("capacity_search") or {}).get("unit", "offered load")
        levels = [float(s["label"]) for s in order]
        written.append(_server_plot(plt, levels, [s["key"] for s in order], directory, unit=unit))

    points = _level_points(report, runs)
    if points:
        unit = (report.get("capacity_search") or {}).get("unit", "offered load")
        xs = [p[0] for p in points]
        for name, idx, ylabel in (
            ("latency_vs_concurrency.png", 1, "ttfa p95 (ms)"),
            ("rejection_vs_concurrency.png", 2, "rejection rate"),
        ):
            fig, ax = plt.subplots(figsize=(6, 4))
            ys = [p[idx] for p in points]
            ax.plot(xs, [y if y is not None else float("nan") for y in ys], "o-", clip_on=False)
            ax.set_xlim(0.0, max(xs) * HEADROOM)
            ax.set_ylim(*(RATE_LIMITS if idx == 2 else value_limits(ys)))
            ax.set_xlabel(unit)
            ax.set_ylabel(ylabel)
            ax.set_title(ylabel + " against load")
            written.append(_save(plt, fig, directory / name))
    return written


def _server_plot(
    plt: Any,
    xs: Sequence[float],
    keys: Sequence[Mapping[str, Any]],
    directory: Path,
    *,
    time_span: float | None = None,
    unit: str = "",
) -> Path:
    """Running / waiting requests (max in each slice or step) and KV cache usage (mean),
    against time (``time_span``: the latency plot's axis) or against the offered level."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    shown: list[float | None] = []
    for series, style in (("running", "-"), ("waiting", "--")):
        ys = [k.get(series, {}).get("max") for k in keys]
        shown.extend(ys)
        ax.plot(
            xs, [y if y is not None else float("nan") for y in ys], style, label=f"{series} (max)"
        )
    ax.set_ylim(*value_limits(shown))
    ax.set_ylabel("requests")
    ax.legend(loc="upper left")
    ax2 = ax.twinx()
    kv = [k.get("kv_cache_usage", {}).get("mean") for k in keys]
    ax2.plot(xs, [y if y is not None else float("nan") for y in kv], ":", color="grey")
    ax2.set_ylim(*RATE_LIMITS)
    ax2.set_ylabel("KV cache usage (mean, dotted)")
    if time_span is not None:
        _time_axis(ax, time_span)
        ax.set_title("server: requests and KV cache over time")
        return _save(plt, fig, directory / "server_over_time.png")
    ax.set_xlim(0.0, max(xs) * HEADROOM)
    ax.set_xlabel(unit)
    ax.set_title("server: requests and KV cache against load")
    return _save(plt, fig, directory / "server_vs_concurrency.png")
