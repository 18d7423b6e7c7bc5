"""Audio continuity as vLLM-Omni defines it (docs/metrics.md "Audio continuity"): the worst
deficit, the OK verdict per threshold, "not measured" never OK, the counts and rates; and
``--stagger``'s rotation of a pass (docs/metrics.md "A steady start"). Pure: injected times.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.loadconfig import load_config
from support.paths import HELLO, SHORT

from duplexctl.audio.playback import PlaybackClock, WorstDeficit
from duplexctl.errors import BadInput
from duplexctl.load.script import build_script
from duplexctl.report import continuity
from duplexctl.report.slo import parse_slo
from duplexctl.report.turns import Delta, TurnTimes, compute_turn
from duplexctl.scenario.model import Say, Silence, Wait

#: a stream: (seconds after the previous chunk, chunk ms)
streams = st.lists(st.tuples(st.floats(0, 0.5), st.floats(1, 300)), min_size=1, max_size=40)


def their_formula(arrivals: list[float], durations_ms: list[float]) -> float:
    """vLLM-Omni's max_underrun as its docstring states it, in ms: a player starting at the
    first chunk plays in real time; each later chunk's deficit is (arrival − first arrival)
    minus the audio received before it; the worst, 0 when none is positive."""
    worst, before = 0.0, 0.0
    for i, (t, ms) in enumerate(zip(arrivals, durations_ms, strict=True)):
        if i:
            worst = max(worst, (t - arrivals[0]) * 1000 - before)
        before += ms
    return worst


@given(streams, st.floats(0, 400))
def test_the_worst_deficit_is_vllm_omnis_and_the_clocks_stall_is_it_less_the_prebuffer(
    stream: list[tuple[float, float]], prebuffer_ms: float
) -> None:
    arrivals, t = [], 10.0
    for gap, _ms in stream:
        t += gap
        arrivals.append(t)
    durations = [ms for _gap, ms in stream]
    deficit = WorstDeficit()
    clock = PlaybackClock(prebuffer_ms)
    for at, ms in zip(arrivals, durations, strict=True):
        deficit.add(at, ms)
        clock.receive(at, ms)
    expected = their_formula(arrivals, durations)
    assert deficit.worst_ms == pytest.approx(expected, abs=1e-3)
    assert clock.audio_underrun_ms == pytest.approx(expected, abs=1e-3)
    # a clock that waits inserts exactly the deficit beyond its prebuffer, in total
    assert clock.stall_ms == pytest.approx(max(0.0, expected - prebuffer_ms), abs=1e-3)


def test_a_steady_late_stream_accumulates_and_the_truth_is_computable() -> None:
    """serve --realtime-factor 1.15 --chunk-ms 100 --reply-seconds 1: 10 units, unit k at
    k × 115 ms; the worst deficit is (10 − 1) × 100 × 0.15 = 135 ms (each gap is 15 ms)."""
    clock = PlaybackClock(0)
    for k in range(10):
        clock.receive(5.0 + k * 0.115, 100)
    assert clock.audio_underrun_ms == pytest.approx(135)
    assert clock.underruns == 9 and clock.stall_ms == pytest.approx(135)


def test_chunks_after_a_flush_are_not_measured() -> None:
    clock = PlaybackClock(0)
    clock.receive(0.0, 100)
    clock.receive(0.1, 100)
    clock.flush(0.15)
    clock.receive(2.0, 100)  # nobody listens any more: its lateness is not the listener's
    assert clock.audio_underrun_ms == 0.0


def _turn(**kw: object) -> TurnTimes:
    t = TurnTimes(index=1, t_eos=0, t_created=10_000_000, t_done=900_000_000, status="completed")
    for k, v in kw.items():
        setattr(t, k, v)
    return t


def test_a_response_without_audio_is_not_measured_and_never_ok() -> None:
    record = compute_turn(_turn())  # a response.done with no audio delta
    verdict = continuity.judge(record, (50, 100, 200))
    assert verdict.not_measured == continuity.NO_AUDIO and verdict.ok == {}
    counts: Counter[str] = Counter()
    continuity.count(counts, verdict)
    assert counts["continuity.responses"] == 1 and counts["continuity.measured"] == 0
    assert not any(k.startswith(("continuity.ok.", "continuity.judged.")) for k in counts)
    rates = continuity.scalars(counts)
    assert rates == {"session_rtf_below_1_rate": None}  # no threshold judged: no OK rate
    section = continuity.section(counts, _empty())
    assert section["not_measured"] == {"no_audio": 1} and section["ok_rate"] == {}
    assert "continuity OK" not in " ".join(continuity.lines(section))


def test_audio_cut_before_it_played_is_not_measured() -> None:
    delta = Delta(recv_ns=100_000_000, audio_ms=200.0)
    cut = _turn(deltas=[delta], p0=int(0.7e9), heard_ms=0.0, audio_underrun_ms=0.0)
    record = compute_turn(cut)
    assert "audio_underrun_ms" not in record.figures
    assert continuity.judge(record, (100,)).not_measured == continuity.CUT_BEFORE_PLAYING


def test_ok_is_at_or_under_each_threshold_and_rates_are_over_the_measured() -> None:
    counts: Counter[str] = Counter()
    for worst in (0.0, 50.0, 135.0, 300.0):
        played = _turn(
            deltas=[Delta(10_000_000, 100.0)], p0=10_000_000, heard_ms=100.0,
            audio_underrun_ms=worst,
        )  # fmt: skip
        continuity.count(counts, continuity.judge(compute_turn(played), (50, 100, 200)))
    continuity.count(counts, continuity.judge(compute_turn(_turn()), (50, 100, 200)))
    rates = continuity.scalars(counts)
    assert rates["continuity_ok_rate_50"] == pytest.approx(2 / 4)  # 50 is OK at 50
    assert rates["continuity_ok_rate_100"] == pytest.approx(2 / 4)
    assert rates["continuity_ok_rate_200"] == pytest.approx(3 / 4)
    lines = continuity.lines(continuity.section(counts, _empty()))
    assert "of 4 measured responses; 1 not measured (no audio 1), counted in no rate" in lines[1]


def test_a_session_rtf_is_the_mean_of_its_responses() -> None:
    session = continuity.SessionContinuity()
    for rtf_created_to_last_ns in (1_100_000_000, 900_000_000):
        t = _turn(deltas=[Delta(400_000_000, 500.0), Delta(rtf_created_to_last_ns, 500.0)])
        record = compute_turn(t)
        session.add(record, continuity.judge(record, (100,)))
    assert session.rtf == pytest.approx((1.09 + 0.89) / 2)
    counts: Counter[str] = Counter()
    assert continuity.count_session(counts, session) == pytest.approx(0.99)
    assert continuity.count_session(counts, continuity.SessionContinuity()) is None
    assert continuity.scalars(counts)["session_rtf_below_1_rate"] == 1.0
    assert counts["continuity.sessions_rtf_not_measured"] == 1


def _empty() -> object:
    from duplexctl.report.histogram import HistogramSet

    return HistogramSet()


@pytest.mark.parametrize(
    ("text", "problem"),
    [("50,abc", "'abc' is not a threshold"), ("50,50", "repeated"), ("0", "from 1 to 60000")],
)
def test_bad_thresholds_name_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        continuity.parse_thresholds(text)
    assert continuity.parse_thresholds("200, 50ms,100") == (50, 100, 200)


def test_an_slo_on_a_threshold_not_judged_is_refused_before_the_run() -> None:
    assert parse_slo("continuity_ok_rate_150>=99%").threshold == pytest.approx(0.99)
    config = load_config(
        inputs=[SHORT], sessions=1, duration_s=1, slos=["continuity_ok_rate_150>=0.9"]
    )
    with pytest.raises(BadInput, match="150 ms is not a --continuity-thresholds value"):
        config.validate()


def test_stagger_rotates_the_pass_at_its_idle_points() -> None:
    script = build_script([SHORT, HELLO])  # two turns: say, wait, say, wait
    scenario = script.scenario
    spans = [sum(script.step_seconds(s) for s in scenario.steps[a:b]) for a, b in ((0, 2), (2, 4))]
    at_start, _ = script.staggered(scenario, [], 0.0)
    assert at_start.steps == scenario.steps
    # a quarter of the way: inside the first turn, silent for its rest, then the second
    quarter, marks = script.staggered(scenario, ["cancel", None, None, None], 0.25)
    silence, *rest = quarter.steps
    assert isinstance(silence, Silence)
    assert silence.ms == pytest.approx((spans[0] - 0.25 * sum(spans)) * 1000, abs=1)
    assert [type(s) for s in rest] == [Say, Wait, Say, Wait]
    assert rest[0] == scenario.steps[2] and rest[2] == scenario.steps[0]
    assert marks == [None, None, None, "cancel", None]  # the mix marks move with their steps
    # exactly at the second turn's start: begins there, no silence
    second, _ = script.staggered(scenario, [], spans[0] / sum(spans))
    assert second.steps[0] == scenario.steps[2]
