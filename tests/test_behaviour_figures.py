"""The behaviour figures' definitions (docs/metrics.md "Conversation behaviour") on
hand-made voice activity, and the timeline they are read from."""

from __future__ import annotations

import numpy as np
import pytest

from duplexctl.behaviour.activity import Segment
from duplexctl.behaviour.figures import ScriptedEvents, conversation_figures
from duplexctl.behaviour.timeline import ASSISTANT, USER, ConversationTimeline, EnergyCache


def S(a: float, b: float) -> Segment:
    return Segment(a, b)


def test_takeover_needs_more_than_a_second_of_speech_started_in_the_pause() -> None:
    user = [S(0, 1000), S(2500, 3500)]
    pauses = [(1000.0, 2500.0)]
    took = conversation_figures(user, [S(1300, 2600)], ScriptedEvents(pauses=pauses))
    short = conversation_figures(
        user, [S(1300, 2200)], ScriptedEvents(pauses=pauses)
    )  # 900 ms: a backchannel?
    before = conversation_figures(
        user, [S(500, 2600)], ScriptedEvents(pauses=pauses)
    )  # started in speech
    assert (took.takeovers, short.takeovers, before.takeovers) == (1, 0, 0)
    assert took.summary()["takeover"] is True and took.summary()["takeover_rate"] == 1.0
    assert short.summary()["takeover"] is False


def test_response_gap_is_signed_and_a_turn_end_without_answer_is_counted() -> None:
    user = [S(0, 1000), S(4000, 5000)]
    f = conversation_figures(user, [S(800, 2000)], ScriptedEvents(turn_ends=[1000.0, 5000.0]))
    assert f.response_gaps_ms == [-200.0]  # the assistant started 200 ms early: overlap
    assert f.no_response == 1 and f.summary()["no_response_rate"] == 0.5
    late = conversation_figures(user, [S(1700, 2000)], ScriptedEvents(turn_ends=[1000.0]))
    assert late.response_gaps_ms == [700.0]


def test_a_turn_end_the_conversation_ended_right_after_is_cut_off_not_unanswered() -> None:
    """A load session the run stopped 300 ms after the user finished was not left
    unanswered: that turn end is no trial (counted apart); 5 s or more of conversation
    without an answer, or the user speaking again, is an unanswered turn end."""
    user = [S(0, 1000)]
    cut = conversation_figures(user, [], ScriptedEvents(turn_ends=[1000.0], end_ms=1300.0))
    assert (cut.turn_ends, cut.no_response, cut.cut_off_turn_ends) == (0, 0, 1)
    assert "no_response_rate" not in cut.summary()
    assert cut.counts()["behaviour.cut_off_turn_ends"] == 1
    waited = conversation_figures(user, [], ScriptedEvents(turn_ends=[1000.0], end_ms=6000.0))
    assert (waited.turn_ends, waited.no_response, waited.cut_off_turn_ends) == (1, 1, 0)
    again = conversation_figures(
        [S(0, 1000), S(2000, 2500)], [], ScriptedEvents(turn_ends=[1000.0], end_ms=2600.0)
    )
    assert (again.turn_ends, again.no_response) == (1, 1)  # the user went on: unanswered
    answered = conversation_figures(
        user, [S(1200, 1290)], ScriptedEvents(turn_ends=[1000.0], end_ms=1300.0)
    )
    assert answered.response_gaps_ms == [200.0]  # an answer that began still counts


def test_stop_latency_from_the_detected_onset_to_the_end_of_the_assistant() -> None:
    user = [S(0, 1000), S(3020, 4000)]
    assistant = [S(1500, 3330)]
    f = conversation_figures(user, assistant, ScriptedEvents(interruptions=[3000.0]))
    assert f.stop_latencies_ms == [pytest.approx(310.0)]  # onset as detected: 3020
    assert f.interrupt_overlap_ms == [pytest.approx(310.0)]
    idle = conversation_figures(user, [S(1500, 2500)], ScriptedEvents(interruptions=[3000.0]))
    assert idle.stop_latencies_ms == []  # nothing was playing: nothing to stop


def test_backchannels_overlap_and_mutual_silence() -> None:
    user = [S(0, 6000)]
    assistant = [S(1000, 1400), S(3000, 3500), S(7000, 9000)]
    f = conversation_figures(user, assistant, ScriptedEvents())
    assert f.backchannels == 2
    assert f.summary()["backchannels_per_min"] == pytest.approx(2 / 0.1)
    assert f.overlap_ms == 900.0
    assert f.mutual_silence_ms == 1000.0  # 6000..7000


def test_timeline_places_energy_where_it_was_heard() -> None:
    t = ConversationTimeline()
    tone = (0.3 * np.sin(np.arange(24000) * 2 * np.pi * 440 / 24000)).astype(np.float32)
    t.add(ASSISTANT, tone, 24000, 1500.0)  # one second, heard from 1.5 s
    t.add(USER, np.zeros(16000 * 3, dtype=np.float32), 16000, 0.0)
    (seg,) = t.segments(ASSISTANT)
    assert seg.start_ms == pytest.approx(1500.0, abs=10) and seg.end_ms == pytest.approx(
        2500.0, abs=10
    )
    assert t.segments(USER) == []
    assert t.length_ms() == pytest.approx(3000.0)


def test_a_clips_frame_energies_computed_once_are_the_same_as_computed_each_time() -> None:
    """load shares one EnergyCache across its sessions: each view of a clip (offset, length,
    phase on the 10 ms grid) is summed once; every session's timeline must hold exactly the
    energies it would have summed itself, at 100 and 40 ms appends, aligned or not."""
    rng = np.random.default_rng(7)
    clip = (0.2 * rng.standard_normal(16000 * 2)).astype(np.float32)
    cache = EnergyCache()
    for packet, shift_ms in ((1600, 0.0), (640, 0.0), (1600, 3.3125), (640, 7.5)):
        for _session in range(2):  # the second session reads every view from the cache
            cached, computed = ConversationTimeline(), ConversationTimeline()
            for offset in range(0, clip.size - packet + 1, packet):
                view = clip[offset : offset + packet]
                at_ms = 250.0 + shift_ms + offset / 16.0
                cached.add(USER, view, 16000, at_ms, origin=(clip, offset), cache=cache)
                computed.add(USER, view, 16000, at_ms)
            np.testing.assert_array_equal(cached.levels(USER), computed.levels(USER))
    # one entry per view and phase, reused by the second session
    assert len(cache._views) == sum(
        len(range(0, clip.size - p + 1, p)) for p in (1600, 640, 1600, 640)
    )
