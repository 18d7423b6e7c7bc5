"""PNG plots of load runs (``duplexctl report --plot DIR``), drawn with matplotlib.

matplotlib is imported lazily, inside :func:`draw`, with the non-interactive ``Agg`` backend:
it is an optional dependency (``pip install duplexctl[plot]``), slow to import, and must
never try to open a window on a headless CI machine.

Plots:

* ``latency_over_time.png`` — ttfa p50/p95/p99 per time slice, with turns per slice;
  climbing latency or a burst of rejections during the run shows up here, not in a
  whole-run percentile.
* ``rejection_over_time.png`` — rejection rate per slice.
* ``latency_vs_concurrency.png`` / ``rejection_vs_concurrency.png`` — for a capacity
  search (each step's ttfa p95 and rejection rate against its offered level), or for several
  runs given together (each run's offered level from its config).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from duplexctl.errors import MissingDependency


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
        return [(s["level"], s.get("ttfa_p95"), s.get("rejection_rate")) for s in cap["steps"]]
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


def draw(
    report: Mapping[str, Any], directory: Path, *, runs: Sequence[Mapping[str, Any]] = ()
) -> list[Path]:
    """Write the PNGs that the report has data for; returns their paths."""
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    slices = report.get("slices", [])
    if slices:
        t = [(s["start_s"] + s["end_s"]) / 2 for s in slices]
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for p, style in (("p50", "-"), ("p95", "--"), ("p99", ":")):
            ys = [s["figures"].get("ttfa_ms", {}).get(p) for s in slices]
            ax.plot(t, [y if y is not None else float("nan") for y in ys], style, label=f"ttfa {p}")
        ax.set_xlabel("time since start (s)")
        ax.set_ylabel("ttfa (ms)")
        ax.set_title("turn latency over time")
        ax2 = ax.twinx()
        ax2.bar(
            t,
            [s["turns"] for s in slices],
            width=0.8 * (slices[0]["end_s"] - slices[0]["start_s"]),
            alpha=0.15,
            color="grey",
        )
        ax2.set_ylabel("turns per slice")
        ax.legend(loc="upper left")
        path = directory / "latency_over_time.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

        fig, ax = plt.subplots(figsize=(8, 3.5))
        rates = [s.get("rejection_rate") for s in slices]
        ax.plot(t, [r if r is not None else float("nan") for r in rates], "o-")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("time since start (s)")
        ax.set_ylabel("rejection rate")
        ax.set_title("admission rejections over time")
        path = directory / "rejection_over_time.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

    points = _level_points(report, runs)
    if points:
        unit = (report.get("capacity_search") or {}).get("unit", "offered load")
        xs = [p[0] for p in points]
        for name, idx, ylabel in (
            ("latency_vs_concurrency.png", 1, "ttfa p95 (ms)"),
            ("rejection_vs_concurrency.png", 2, "rejection rate"),
        ):
            fig, ax = plt.subplots(figsize=(6, 4))
            ys = [p[idx] if p[idx] is not None else float("nan") for p in points]
            ax.plot(xs, ys, "o-")
            ax.set_xlabel(unit)
            ax.set_ylabel(ylabel)
            ax.set_title(ylabel + " against load")
            path = directory / name
            fig.tight_layout()
            fig.savefig(path, dpi=100)
            plt.close(fig)
            written.append(path)
    return written
