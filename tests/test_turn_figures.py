"""Turn figures from hand-made timestamps: every docs/metrics.md definition, checked by arithmetic."""

from __future__ import annotations

import pytest

from duplexctl.report.turns import (
    EXPECTABLE_FIGURES,
    ORIGINS,
    BargeTimes,
    Delta,
    ResumeTimes,
    TurnTimes,
    compute_turn,
    compute_turns,
    outcome_of,
    percentile,
)

MS = 1_000_000


def ms(x: float) -> int:
    return int(x * MS)


def spoken_turn() -> TurnTimes:
    # t_eos at 1000 ms; commit at 1200; created at 1250; deltas of 200 ms each
    return TurnTimes(
        index=1,
        step=1,
        source="hello.wav",
        end_mode="commit",
        t_speech_start=ms(300),
        t_eos=ms(1000),
        t_commit=ms(1200),
        t_created=ms(1250),
        response_id="resp-x",
        deltas=[Delta(ms(1550), 200), Delta(ms(1650), 200), Delta(ms(1850), 200)],
        first_text_recv=ms(1500),
        t_done=ms(1900),
        status="completed",
        reason="stop",
        p0=ms(1600),
        playback_end=ms(2200),
        heard_ms=600,
    )


def test_latency_figures_follow_their_definitions() -> None:
    rec = compute_turn(spoken_turn())
    f = {k: v.value for k, v in rec.figures.items()}
    assert f["ttfa_ms"] == 550  # 1550 - t_eos 1000
    assert f["ttft_ms"] == 500
    assert f["ttfa_created_ms"] == 300
    assert f["ttfa_commit_ms"] == 350
    assert f["first_audible_ms"] == 600  # P0 1600 - 1000
    assert f["turn_ms"] == 900
    assert f["audio_ms"] == 600
    # (1850 - 1550) / (600 - 200)
    assert f["rtf"] == pytest.approx(0.75)
    # vLLM-Omni: (1850 - 1250) / 600
    assert f["rtf_omni"] == pytest.approx(1.0)
    assert f["chunk_gap_ms"] == {"n": 2, "p50": 100, "p95": 200, "p99": 200, "max": 200}
    assert f["underruns"] == 0 and f["heard_ms"] == 600
    assert rec.outcome == "spoke" and rec.status == "completed" and rec.reason == "stop"
    assert not rec.early_start
    for name, fig in rec.figures.items():
        assert fig.measurement_origin == ORIGINS[name]
    assert "cancel_ack_ms" not in rec.figures and "resume_ms" not in rec.figures


def test_every_figure_has_an_origin_and_is_expectable() -> None:
    assert set(ORIGINS) == set(EXPECTABLE_FIGURES)
    assert all(ORIGINS.values())


def test_early_start_is_negative_ttfa() -> None:
    t = spoken_turn()
    t.deltas = [Delta(ms(900), 200)]
    rec = compute_turn(t)
    assert rec.figures["ttfa_ms"].value == -100
    assert rec.early_start
    assert "rtf" not in rec.figures  # one chunk: no span to divide
    assert "chunk_gap_ms" not in rec.figures


def test_spoken_barge_in_figures() -> None:
    interrupted = spoken_turn()
    interrupted.deltas = [Delta(ms(1550), 200), Delta(ms(1750), 200), Delta(ms(1950), 200)]
    interrupted.t_done = ms(2000)
    interrupted.status = "cancelled"
    interrupted.reason = "turn_detected"
    interrupted.playback_end = ms(1980)  # flushed on the cancelled response.done
    interrupted.barge = BargeTimes(kind="speech", t_bi=ms(1700), interrupt_turn=2)
    nxt = TurnTimes(index=2, t_eos=ms(2500), deltas=[Delta(ms(2850), 200)], t_done=ms(3100))
    rec, rec2 = compute_turns([interrupted, nxt])
    f = {k: v.value for k, v in rec.figures.items()}
    assert rec.outcome == "cancelled"
    assert f["cancel_ack_ms"] == 300
    assert f["audio_stop_ms"] == 250  # last delta 1950 - 1700
    assert f["leaked_audio_ms"] == 400  # 1750 and 1950
    assert f["heard_stop_ms"] == 280
    assert f["post_interrupt_ttfa_ms"] == 350
    assert rec2.figures["ttfa_ms"].value == 350


def test_no_audio_after_the_stimulus_is_zero() -> None:
    t = spoken_turn()
    t.status = "cancelled"
    t.reason = "client_cancelled"
    t.barge = BargeTimes(kind="cancel", t_bi=ms(1860))
    f = {k: v.value for k, v in compute_turn(t).figures.items()}
    assert f["audio_stop_ms"] == 0.0 and f["leaked_audio_ms"] == 0
    assert f["cancel_ack_ms"] == 40
    assert "post_interrupt_ttfa_ms" not in f


def test_resume_figures() -> None:
    t = spoken_turn()
    t.resumes = [
        ResumeTimes(
            t_drop=ms(1700),
            t_open=ms(2210),
            t_resume_sent=ms(2211),
            t_resumed=ms(2215),
            outcome="resumed",
            replayed_events=7,
            duplicates_dropped=2,
            seq_gaps=0,
            scripted_wait_ms=500,
        )
    ]
    f = {k: v.value for k, v in compute_turn(t).figures.items()}
    assert f["resume_ms"] == 515
    assert f["reconnect_ms"] == 510 and f["resume_handshake_ms"] == 4
    assert (f["replayed_events"], f["duplicates_dropped"], f["seq_gaps"]) == (7, 2, 0)


@pytest.mark.parametrize(
    ("changes", "outcome"),
    [
        ({}, "spoke"),
        ({"status": "cancelled"}, "cancelled"),
        ({"status": "failed"}, "failed"),
        ({"error": "engine_error", "t_done": None, "status": None}, "failed"),
        ({"listened": True}, "listened"),
        ({"deltas": [], "first_text_recv": None}, "listened"),
        ({"t_done": None, "status": None, "timed_out": True}, "no_response"),
    ],
)
def test_outcomes(changes: dict[str, object], outcome: str) -> None:
    t = spoken_turn()
    for k, v in changes.items():
        setattr(t, k, v)
    assert outcome_of(t) == outcome


def test_missing_points_leave_figures_out() -> None:
    rec = compute_turn(TurnTimes(index=1, timed_out=True))
    assert rec.outcome == "no_response"
    assert rec.figures == {}
    assert rec.value("ttfa_ms") is None
    assert rec.value("outcome") == "no_response"
    js = rec.to_json()
    assert js["figures"] == {} and js["outcome"] == "no_response"


def test_value_of_gap_summary_is_its_max() -> None:
    rec = compute_turn(spoken_turn())
    assert rec.value("chunk_gap_ms") == 200
    assert rec.to_json()["figures"]["ttfa_ms"] == {
        "value": 550.0,
        "measurement_origin": ORIGINS["ttfa_ms"],
    }


def test_percentile_nearest_rank() -> None:
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile(list(range(1, 101)), 95) == 95
