"""Time slices of long runs: at most MAX_SLICES kept, merged pairwise exactly (issue 16.5).

A load run's slicer used to keep every 10-second slice, each with a histogram per metric:
a load worker's memory grew ~1 MB a minute for as long as the run lasted. These tests feed
slicers hours of simulated time (no clock, no sockets: the slicer only sees the times it
is given) and check that the slices kept are bounded and are exactly those an unbounded
slicer at the doubled length records, that slicers at different lengths merge exactly,
and that a report says which slice length it used.
"""

from __future__ import annotations

import copy
import tracemalloc
from dataclasses import dataclass, field

import numpy as np
import pytest

from duplexctl.report.histogram import HistogramSet
from duplexctl.report.load_report import build_report, summary_lines, tally_of
from duplexctl.report.slices import MAX_SLICES, TimeSlicer, Windows
from duplexctl.report.tally import RunTally

WINDOWS = Windows(warmup_s=30.0, ramp_end_s=95.0)


@dataclass
class SimulatedRun:
    """Everything a load process records, at times on a simulated clock (s from 0), in the
    order a recorder gets it: turns up to ``late_s`` after their end of speech (a turn is
    recorded once its figures are final), send lags in batches as the recorder folds them.
    """

    hours: float
    seed: int = 3
    late_s: float = 25.0
    events: list[tuple[float, int, tuple[object, ...]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        end = self.hours * 3600.0
        n = int(end / 2.0)
        for i, t in enumerate(rng.uniform(0, end, n).tolist()):
            figures: dict[str, float | None] = {
                "ttfa_ms": float(rng.lognormal(6.0, 0.4)) - 50.0,  # some negative
                "turn_ms": float(rng.lognormal(7.5, 0.3)),
                "rtf": float(rng.uniform(0.5, 1.5)),
                "cancel_ack_ms": None if i % 3 else float(rng.gamma(3, 20)),
            }
            arrives = min(end, t + float(rng.uniform(0, self.late_s)))
            self.events.append((arrives, 0, (t, figures, "spoke" if i % 7 else "failed")))
        for t in rng.uniform(0, end, n // 4).tolist():
            admission = "admitted" if rng.random() < 0.9 else "rejected_capacity"
            self.events.append((t, 1, (t, admission, float(rng.gamma(2, 3)))))
        for start in np.arange(0.0, end, 7.0).tolist():
            ts = np.sort(rng.uniform(start, min(end, start + 7.0), 300))
            self.events.append((ts[-1], 2, (ts, rng.lognormal(-1.0, 1.2, ts.size))))
        self.events.sort(key=lambda e: (e[0], e[1]))

    def feed(self, slicer: TimeSlicer) -> TimeSlicer:
        for _arrives, kind, args in self.events:
            if kind == 0:
                t, figures, outcome = args
                slicer.add_turn(t, figures, outcome)  # type: ignore[arg-type]
                if outcome == "failed":
                    slicer.add_error(t)  # type: ignore[arg-type]
                    slicer.add_audio(t, 1.5)  # type: ignore[arg-type]
            elif kind == 1:
                t, admission, connect_ms = args
                slicer.add_admission(t, admission)  # type: ignore[arg-type]
                slicer.add_figure(t, "connect_ms", connect_ms)  # type: ignore[arg-type]
            else:
                slicer.add_figures(args[0], "send_lag_ms", args[1])  # type: ignore[arg-type]
        return slicer


@pytest.fixture(scope="module")
def three_hours() -> SimulatedRun:
    return SimulatedRun(hours=3.0)


def as_dicts(slicer: TimeSlicer) -> list[dict[str, object]]:
    return [sl.to_dict(encode_histograms=True) for sl in slicer.slices()]


def test_a_long_run_keeps_at_most_the_cap_and_equals_an_unbounded_slicer(
    three_hours: SimulatedRun,
) -> None:
    capped = three_hours.feed(TimeSlicer(10.0, windows=WINDOWS))
    # 3 h at 10 s is 1,080 slices: 20, 40 and 80 s are still more than 128; 160 s is 68
    assert (capped.slice_s, capped.doublings, capped.requested_s) == (160.0, 4, 10.0)
    assert len(capped.slices()) <= MAX_SLICES
    # the very slices a run with --slice 160 records, whatever the cap did on the way
    reference = three_hours.feed(TimeSlicer(160.0, windows=WINDOWS, max_slices=10**6))
    assert reference.doublings == 0
    assert as_dicts(capped) == as_dicts(reference)
    assert [sl.phase for sl in capped.slices()][:2] == ["warmup+ramp+steady", "steady"]
    # the whole-run histograms are not touched by slicing: equal to a 10 s unbounded slicer's
    fine = three_hours.feed(TimeSlicer(10.0, windows=WINDOWS, max_slices=10**6))
    assert len(fine.slices()) == 1080
    assert capped.phases == fine.phases
    # and every slice's content is there, added up: histograms, turns, counts
    assert _totals(capped) == _totals(fine)


def _totals(slicer: TimeSlicer) -> tuple[object, ...]:
    hists = HistogramSet()
    for sl in slicer.slices():
        hists.merge(sl.histograms)
    sls = slicer.slices()
    return (
        hists,
        sum(sl.turns for sl in sls),
        sum(sl.errors for sl in sls),
        sum(sl.attempts for sl in sls),
        sum(sl.rejections for sl in sls),
        sum(sl.audio_s for sl in sls),
    )


def test_slicers_at_different_lengths_merge_exactly(three_hours: SimulatedRun) -> None:
    """Worker A ran the whole 3 h (doubled 4 times), worker B stopped after 40 minutes
    (doubled once); merged either way, and through their encodings (what the parent of the
    worker processes and ``duplexctl report A B`` merge), they are one slicer fed both."""
    late = SimulatedRun(hours=40 / 60, seed=9)
    a = three_hours.feed(TimeSlicer(10.0, windows=WINDOWS))
    b = late.feed(TimeSlicer(10.0, windows=WINDOWS))
    assert (a.slice_s, b.slice_s) == (160.0, 20.0)
    both = late.feed(three_hours.feed(TimeSlicer(10.0, windows=WINDOWS)))
    a_then_b = copy.deepcopy(a).merge(b)
    b_then_a = copy.deepcopy(b).merge(a)
    decoded = TimeSlicer.decode(b.encode()).merge(TimeSlicer.decode(a.encode()))
    for merged in (a_then_b, b_then_a, decoded):
        assert merged.slice_s == 160.0
        assert as_dicts(merged) == as_dicts(both)
        assert merged.phases == both.phases
    with pytest.raises(ValueError, match="different length"):
        a.merge(TimeSlicer(30.0, windows=WINDOWS))


def test_an_old_report_without_a_requested_length_decodes_as_written() -> None:
    """Reports written before the cap have ``slice_s`` only, and may hold more slices than
    the cap: they decode as written, and merge with a capped run exactly."""
    old = SimulatedRun(hours=0.5, seed=5).feed(TimeSlicer(5.0, windows=WINDOWS, max_slices=10**6))
    encoded = old.encode()
    del encoded["requested_slice_s"]
    assert len(encoded["slices"]) == 360
    decoded = TimeSlicer.decode(encoded)
    assert (decoded.slice_s, decoded.requested_s, len(decoded.slices())) == (5.0, 5.0, 360)
    assert as_dicts(decoded) == as_dicts(old)
    merged = TimeSlicer(5.0, windows=WINDOWS).merge(decoded)
    assert merged.slice_s == 20.0 and len(merged.slices()) == 90
    assert merged.phases == old.phases


def test_a_report_of_a_long_run_states_the_slice_length_it_used(
    three_hours: SimulatedRun,
) -> None:
    tally = RunTally(origin=0.0, slice_s=10.0, windows=WINDOWS)
    three_hours.feed(tally.slicer)
    report = build_report(
        tally, config={"slice_s": 10.0}, workers=[], wall_s=3 * 3600.0, chunk_ms=100, url=None
    )
    assert report["slicing"]["slice_s"] == 160.0
    assert report["slicing"]["requested_slice_s"] == 10.0
    assert "--slice 10 s doubled 4 times to 160 s" in report["slicing"]["note"]
    assert {s["end_s"] - s["start_s"] for s in report["slices"]} == {160.0}
    assert any(
        line.startswith("time slices: --slice 10 s doubled") for line in summary_lines(report)
    )
    assert tally_of(report).slicer.slice_s == 160.0  # the saved tally re-reads as it was

    short = RunTally(origin=0.0, slice_s=10.0, windows=WINDOWS)
    short.slicer.add_turn(12.0, {"ttfa_ms": 300.0}, "spoke")
    plain = build_report(short, config={}, workers=[], wall_s=20.0, chunk_ms=100, url=None)
    assert plain["slicing"]["note"] == "" and plain["slicing"]["slice_s"] == 10.0
    assert not any(line.startswith("time slices") for line in summary_lines(plain))


def test_six_hours_of_send_lags_stay_within_a_few_megabytes() -> None:
    """What the soak measured: send lags, over a thousand distinct buckets per 10 s slice.
    Six hours of them used to take ~300 MB (2,160 slices of dicts); capped and compacted,
    a few MB."""
    rng = np.random.default_rng(1)
    tracemalloc.start()
    try:
        slicer = TimeSlicer(10.0, windows=WINDOWS)
        for start in np.arange(0.0, 6 * 3600.0, 10.0):
            ts = start + np.sort(rng.uniform(0, 10.0, 2000))
            slicer.add_figures(ts, "send_lag_ms", rng.lognormal(-1.0, 1.2, ts.size))
            slicer.add_figure(start + 5.0, "loop_lag_ms", float(rng.gamma(2, 0.5)))
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(slicer.slices()) <= MAX_SLICES
    assert held < 16e6, f"{held / 1e6:.1f} MB"
