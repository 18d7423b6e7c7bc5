"""Pure load math: arrivals and ramps, exact capacity sweep, capacity search, time slices."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplexctl.load.arrivals import ArrivalProcess, Ramp, parse_duration
from duplexctl.load.capacity import CapacitySearch
from duplexctl.report.concurrency import concurrency_steps, observed_capacity
from duplexctl.report.slices import Slice, TimeSlicer, Windows, exclude_warmup

# -- arrivals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "burstiness", "cv"),
    [
        ("constant", 1.0, 0.0),
        ("poisson", 1.0, 1.0),
        ("gamma", 0.25, 0.5),
        ("gamma", 1.0, 1.0),
        ("gamma", 4.0, 2.0),
    ],
)
def test_mean_and_cv_of_inter_arrivals(kind: str, burstiness: float, cv: float) -> None:
    gaps = ArrivalProcess(kind, burstiness=burstiness, seed=11).intervals(20.0, 200_000)  # type: ignore[arg-type]
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, abs=0.03)


def test_gamma_burstiness_orders_the_coefficient_of_variation() -> None:
    cvs = []
    for b in (0.1, 0.5, 1.0, 2.0, 8.0):
        gaps = ArrivalProcess("gamma", burstiness=b, seed=5).intervals(5.0, 50_000)
        cvs.append(gaps.std() / gaps.mean())
    assert cvs == sorted(cvs)
    assert cvs[0] < 0.5 < 2.0 < cvs[-1]


def test_same_seed_same_schedule_different_seed_differs() -> None:
    a = ArrivalProcess("gamma", burstiness=3.0, seed=42)
    first = a.schedule(10.0, duration=30.0)
    again = ArrivalProcess("gamma", burstiness=3.0, seed=42).schedule(10.0, duration=30.0)
    assert np.array_equal(first, again)
    assert np.array_equal(first, a.schedule(10.0, duration=30.0))  # no hidden state
    other = ArrivalProcess("gamma", burstiness=3.0, seed=43).schedule(10.0, duration=30.0)
    assert not np.array_equal(first[:50], other[:50])


def test_unset_seed_is_drawn_once_and_kept() -> None:
    a = ArrivalProcess("poisson")
    assert isinstance(a.seed, int)
    assert np.array_equal(a.schedule(5.0, count=20), a.schedule(5.0, count=20))


def test_schedule_bounds_and_count() -> None:
    constant = ArrivalProcess("constant", seed=1)
    assert constant.schedule(4.0, count=4).tolist() == [0.25, 0.5, 0.75, 1.0]
    times = constant.schedule(4.0, duration=2.0)
    assert times.tolist() == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]  # (0, duration)
    poisson = ArrivalProcess("poisson", seed=2).schedule(50.0, duration=200.0)
    assert np.all(np.diff(poisson) > 0) and poisson[-1] < 200.0
    assert len(poisson) == pytest.approx(50 * 200, rel=0.03)
    assert len(ArrivalProcess("poisson", seed=2).schedule(50.0, duration=1e9, count=7)) == 7
    endless = ArrivalProcess("poisson", seed=2).times(50.0)
    assert len(list(itertools.islice(endless, 1000))) == 1000


def test_arrival_validation() -> None:
    with pytest.raises(ValueError, match="not one of"):
        ArrivalProcess("uniform")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="burstiness must be > 0"):
        ArrivalProcess("gamma", burstiness=0)
    with pytest.raises(ValueError, match="applies to gamma"):
        ArrivalProcess("poisson", burstiness=2.0)
    with pytest.raises(ValueError, match="rate must be > 0"):
        ArrivalProcess("poisson", seed=1).intervals(0.0, 5)
    with pytest.raises(ValueError, match="duration or a count"):
        ArrivalProcess("poisson", seed=1).schedule(1.0)


def test_ramped_poisson_follows_the_rate() -> None:
    ramp = Ramp.parse("0:0,100s:100")  # rate 0 → 100/s over 100 s: Λ(t) = t²/2
    times = ArrivalProcess("poisson", seed=9).schedule(ramp, duration=100.0)
    assert len(times) == pytest.approx(5000, rel=0.05)
    first_half = np.count_nonzero(times < 50.0)
    assert first_half == pytest.approx(1250, rel=0.1)  # Λ(50) = 1250
    constant = ArrivalProcess("constant", seed=0).schedule(ramp, count=3)
    assert constant == pytest.approx([math.sqrt(2), 2.0, math.sqrt(6)])


def test_ramp_that_ends_at_zero_ends_the_stream() -> None:
    ramp = Ramp.parse("0:10,10s:10,10s:0")
    times = ArrivalProcess("constant", seed=0).schedule(ramp, duration=1000.0)
    assert len(times) == 100 and times[-1] == pytest.approx(10.0)


def test_ramp_parse_and_queries() -> None:
    ramp = Ramp.parse("0:1, 60s:50")
    assert ramp.points == ((0.0, 1.0), (60.0, 50.0))
    assert ramp.target_at(30) == pytest.approx(25.5)
    assert ramp.target_at(600) == 50.0 and ramp.duration == 60.0 and ramp.peak == 50.0
    assert ramp.level_at(30) == 25
    assert ramp.cumulative(60) == pytest.approx(1530.0)
    assert ramp.cumulative(70) == pytest.approx(2030.0)
    for x in (0.5, 10.0, 700.0, 1530.0, 2000.0):
        assert ramp.cumulative(ramp.time_for_cumulative(x)) == pytest.approx(x)
    assert Ramp.parse("60s:50").points == ((0.0, 0.0), (60.0, 50.0))  # k6-style start at 0
    step = Ramp.parse("0:10,2m:10,2m:40,5m:40")
    assert step.target_at(119.9) == 10.0 and step.target_at(120.0) == 40.0
    assert Ramp.from_stages([(60, 50), (240, 50)], start=1) == Ramp.parse("0:1,1m:50,5m:50")
    assert Ramp.parse(str(step)) == step


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "expected <time>:<target>"),
        ("0:1,,60s:5", "expected <time>:<target>"),
        ("0:1,60s", "is not <time>:<target>"),
        ("0:1,soon:5", "'soon' is not a duration"),
        ("0:1,60s:lots", "target 'lots' is not a number"),
        ("0:1,60s:5,30s:5", "must not decrease"),
        ("0:-1", "target must be >= 0"),
    ],
)
def test_ramp_parse_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        Ramp.parse(spec)
    assert str(info.value).startswith(f"ramp {spec!r}")


def test_parse_duration() -> None:
    assert [parse_duration(t) for t in ("250ms", "60s", "5m", "1.5h", "30", ".5s")] == [
        0.25,
        60.0,
        300.0,
        5400.0,
        30.0,
        0.5,
    ]
    with pytest.raises(ValueError):
        parse_duration("-3s")


# -- observed capacity -----------------------------------------------------------------------


def test_capacity_sweep_edge_cases() -> None:
    assert observed_capacity([]) == 0
    assert observed_capacity([(0.0, 1.0), (1.0, 2.0)]) == 1  # touching: slot handed over
    assert observed_capacity([(1.0, 2.0), (0.0, 1.0)]) == 1  # order of input irrelevant
    assert observed_capacity([(0.0, 1.0), (0.0, 1.0), (0.0, 1.0)]) == 3  # identical
    assert observed_capacity([(0.0, 1.0), (0.999, 2.0)]) == 2
    assert observed_capacity([(0.5, 0.5), (0.5, 0.5)]) == 0  # empty intervals hold nothing
    assert observed_capacity([(0.0, None), (5.0, 6.0)]) == 2  # never closed: open to the end
    assert concurrency_steps([(0, 2), (1, 3), (2, 4)]) == [(0, 1), (1, 2), (2, 2), (3, 1), (4, 0)]
    with pytest.raises(ValueError, match="before it was created"):
        observed_capacity([(2.0, 1.0)])


def brute_force(intervals: list[tuple[int, int]]) -> int:
    points = {t for iv in intervals for t in iv}
    return max((sum(1 for a, b in intervals if a <= t < b) for t in points), default=0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 10)).map(lambda p: (p[0], p[0] + p[1])),
        max_size=40,
    )
)
def test_capacity_sweep_matches_brute_force(intervals: list[tuple[int, int]]) -> None:
    # integer times make touching and identical endpoints frequent
    assert observed_capacity(intervals) == brute_force(intervals)


# -- capacity search -------------------------------------------------------------------------


def knee_oracle(knee: int) -> Callable[[int], tuple[bool, str]]:
    def oracle(level: int) -> tuple[bool, str]:
        return (True, "") if level <= knee else (False, f"ttfa_p95 over 800ms at {level}")

    return oracle


@pytest.mark.parametrize("knee", [1, 2, 7, 37, 64, 100, 513])
def test_capacity_search_finds_the_knee(knee: int) -> None:
    result = CapacitySearch(start=1, factor=2.0).run(knee_oracle(knee))
    assert result.largest_pass == knee
    assert result.first_fail == knee + 1
    assert result.reason == f"ttfa_p95 over 800ms at {knee + 1}"
    assert len(result.steps) <= 2 * math.ceil(math.log2(knee + 1)) + 2


@settings(max_examples=100, deadline=None)
@given(
    knee=st.integers(0, 500),
    start=st.integers(1, 50),
    factor=st.sampled_from([1.0, 1.5, 2.0, 3.0]),
    increment=st.integers(0, 20),
    resolution=st.integers(1, 8),
)
def test_capacity_search_brackets_any_knee(
    knee: int, start: int, factor: float, increment: int, resolution: int
) -> None:
    search = CapacitySearch(start=start, factor=factor, increment=increment, resolution=resolution)
    result = search.run(knee_oracle(knee))
    lo = result.largest_pass or 0
    assert result.first_fail is not None
    assert lo <= knee < result.first_fail
    assert result.first_fail - lo <= resolution
    levels = [s.level for s in result.steps]
    assert len(levels) == len(set(levels))  # never runs a level twice


def test_capacity_search_linear_steps_and_max_level() -> None:
    search = CapacitySearch(start=4, factor=1.0, increment=4, max_level=14)
    proposed = []
    while (level := search.next_level()) is not None:
        assert search.next_level() == level  # idempotent until recorded
        proposed.append(level)
        search.record(level, True)
    assert proposed == [4, 8, 12, 14]
    result = search.result()
    assert (result.largest_pass, result.first_fail) == (14, None)
    assert result.reason == "max level reached without a failure"


def test_capacity_search_first_level_fails() -> None:
    result = CapacitySearch(start=8).run(lambda level: (level <= 2, "rejected_capacity"))
    assert [s.level for s in result.steps] == [8, 4, 2, 3]
    assert (result.largest_pass, result.first_fail) == (2, 3)
    nothing = CapacitySearch(start=1).run(lambda level: (False, "server down"))
    assert (nothing.largest_pass, nothing.first_fail, nothing.reason) == (None, 1, "server down")


def test_capacity_search_rejects_unexpected_record() -> None:
    search = CapacitySearch()
    with pytest.raises(ValueError, match="not the proposed level"):
        search.record(1, True)
    assert search.next_level() == 1
    with pytest.raises(ValueError, match="not the proposed level"):
        search.record(2, True)


# -- slices ----------------------------------------------------------------------------------


def test_slices_bucket_turns_admissions_and_errors() -> None:
    slicer = TimeSlicer(10.0, origin=1000.0, windows=Windows(warmup_s=10.0, ramp_end_s=25.0))
    slicer.add_turn(1000.0, {"ttfa_ms": 900.0, "turn_ms": None}, "spoke")  # slice 0, warmup
    slicer.add_turn(1009.999, {"ttfa_ms": 800.0}, "spoke")
    slicer.add_turn(1010.0, {"ttfa_ms": 300.0}, "listened")  # slice 1, ramp
    slicer.add_turn(1041.0, {"ttfa_ms": 310.0}, "failed")  # slice 4, steady
    slicer.add_admission(1001.0, "admitted")
    slicer.add_admission(1002.0, "rejected_capacity")
    slicer.add_admission(1003.0, "admitted")
    slicer.add_admission(1004.0, "admitted")
    slicer.add_error(1022.0)
    slicer.add_audio(1011.0, 5.0)
    slicer.add_figure(1011.0, "send_lag_ms", 0.4)
    slices = slicer.slices()
    assert [s.index for s in slices] == [0, 1, 2, 3, 4]  # empty slices 2 and 3 kept
    assert [s.turns for s in slices] == [2, 1, 0, 0, 1]
    assert [s.phase for s in slices] == ["warmup", "ramp", "ramp+steady", "steady", "steady"]
    first = slices[0]
    assert (first.attempts, first.rejections, first.rejection_rate) == (4, 1, 0.25)
    assert first.histograms["ttfa_ms"].count == 2
    assert "turn_ms" not in first.histograms
    assert slices[1].rejection_rate is None
    assert slices[1].audio_throughput == pytest.approx(0.5)
    assert slices[1].histograms["send_lag_ms"].count == 1
    assert slices[2].errors == 1
    assert slices[4].outcomes == {"failed": 1}
    assert slicer.phases["warmup"]["ttfa_ms"].count == 2
    assert slicer.steady()["ttfa_ms"].count == 1
    assert slicer.after_warmup()["ttfa_ms"].count == 2
    with pytest.raises(ValueError, match="before the run start"):
        slicer.add_turn(999.0, {})


def test_slicers_from_workers_merge_exactly_and_round_trip() -> None:
    rng = np.random.default_rng(4)
    events = [
        (float(t), float(v))
        for t, v in zip(rng.uniform(0, 60, 600), rng.gamma(4, 80, 600), strict=True)
    ]
    windows = Windows(warmup_s=5.0)
    whole = TimeSlicer(7.5, windows=windows)
    workers = [TimeSlicer(7.5, windows=windows) for _ in range(3)]
    for i, (t, v) in enumerate(events):
        whole.add_turn(t, {"ttfa_ms": v}, "spoke")
        workers[i % 3].add_turn(t, {"ttfa_ms": v}, "spoke")
        whole.add_admission(t, "admitted")
        workers[i % 3].add_admission(t, "admitted")
    merged = TimeSlicer(7.5, windows=windows)
    for worker in workers:
        merged.merge(worker)
    assert [s.to_dict(encode_histograms=True) for s in merged.slices()] == [
        s.to_dict(encode_histograms=True) for s in whole.slices()
    ]
    assert merged.steady() == whole.steady()
    decoded = TimeSlicer.decode(whole.encode())
    assert decoded.encode() == whole.encode()
    assert Slice.from_dict(whole.slices()[3].to_dict(encode_histograms=True)).histograms == (
        whole.slices()[3].histograms
    )
    with pytest.raises(ValueError, match="different length"):
        merged.merge(TimeSlicer(5.0, windows=windows))


def test_exclude_warmup() -> None:
    records = [{"t": 0.0}, {"t": 4.99}, {"t": 5.0}, {"t": 9.0}]
    assert exclude_warmup(records, 5.0) == [{"t": 5.0}, {"t": 9.0}]
    assert exclude_warmup([{"at": 101.0}], 5.0, key="at", origin=100.0) == []
