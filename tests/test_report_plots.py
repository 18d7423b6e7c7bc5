"""Plots whose axes do not mislead (issue 17.6): checked on matplotlib's own objects.

``duplexctl report RUN --plot DIR`` on real saved runs; every figure saved is caught as it is
saved and its axes read back: time from 0 to the end of the run (not to the end of the last
slice), values from 0 with headroom (a 1 ms spread stays flat), rates over exactly [0, 1].
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib
import pytest
from support.commands import saved_load_run
from typer.testing import CliRunner

from duplexctl.cli import app

pytestmark = pytest.mark.realtime

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("plots")
    # 1.5 s slices: the last one is cut by the run's end
    one = saved_load_run(base / "one", "--slice", "1.5", duration="4s")
    two = saved_load_run(base / "two", "--slice", "1.5", "--sessions", "3", duration="4s")
    return one, two


@pytest.fixture
def saved_figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every figure saved during the test, by file name (the Figure object itself)."""
    from matplotlib.figure import Figure

    caught: dict[str, Any] = {}
    original = Figure.savefig

    def savefig(self: Figure, fname: Any, *args: Any, **kwargs: Any) -> None:
        caught[Path(str(fname)).name] = self
        original(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return caught


def plot(tmp_path: Path, *results: Path) -> None:
    res = CliRunner().invoke(app, ["report", *map(str, results), "--plot", str(tmp_path / "plots")])
    assert res.exit_code == 0, res.output


@pytest.mark.slow
def test_time_plots_span_the_run_from_zero(
    runs: tuple[Path, Path], tmp_path: Path, saved_figures: dict[str, Any]
) -> None:
    one, _ = runs
    report = json.loads((one / "report.json").read_text())
    plot(tmp_path, one)
    span = report["wall_s"]
    assert report["slices"][-1]["end_s"] > span  # the last slice reaches past the run
    latency = saved_figures["latency_over_time.png"]
    ax, turns_ax = latency.axes
    assert ax.get_xlim() == pytest.approx((0.0, span))
    shown = [
        s["figures"]["ttfa_ms"][p]
        for s in report["slices"]
        if "ttfa_ms" in s["figures"]
        for p in ("p50", "p95", "p99")
    ]
    low, high = ax.get_ylim()
    assert low == 0.0  # every ttfa here is positive: the axis starts at 0, not at the data
    assert max(shown) < high <= max(shown) * 1.25  # headroom, not a zoom
    assert turns_ax.get_ylim()[0] == 0.0
    rejection = saved_figures["rejection_over_time.png"].axes[0]
    assert rejection.get_ylim() == (0.0, 1.0)
    assert rejection.get_xlim() == pytest.approx((0.0, span))


def test_load_level_plots_start_at_zero_and_rates_stay_in_0_1(
    runs: tuple[Path, Path], tmp_path: Path, saved_figures: dict[str, Any]
) -> None:
    plot(tmp_path, *runs)
    latency = saved_figures["latency_vs_concurrency.png"].axes[0]
    assert latency.get_ylim()[0] == 0.0
    assert latency.get_xlim()[0] == 0.0
    assert saved_figures["rejection_vs_concurrency.png"].axes[0].get_ylim() == (0.0, 1.0)
    # the merged time axis ends with the longer run
    walls = [json.loads((r / "report.json").read_text())["wall_s"] for r in runs]
    time_axis = saved_figures["latency_over_time.png"].axes[0].get_xlim()
    assert time_axis == pytest.approx((0.0, max(walls)))
