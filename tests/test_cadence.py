"""protocol/cadence.py and Pacer.retime: the append length a frame-locked lane wants."""

from __future__ import annotations

import pytest

from duplexctl.audio.pacer import Pace, Pacer
from duplexctl.protocol.cadence import frame_ms, packet_ms, refused_samples
from duplexctl.protocol.client_state import ClientSession
from duplexctl.protocol.errors import parse_error


def test_a_frame_locked_lane_gets_sub_frame_packets() -> None:
    # Nemotron: 80 ms frames; 100 ms appends are refused, 80 ms ones invite inserted silence
    for asked in (100, 80, 200):
        decided = packet_ms(asked, 16000, step_ms=80)
        assert decided.packet_ms == 40
        assert decided.note is not None and f"chunk_ms {asked} sent as 40 ms" in decided.note
    # shorter than a frame: kept (the lane buffers partial frames)
    assert packet_ms(20, 16000, step_ms=80).packet_ms == 20
    assert packet_ms(40, 16000, step_ms=80).note is None
    # MiniCPM-o's 1 s unit: the default 100 ms is already a sub-unit packet
    assert packet_ms(100, 16000, step_ms=1000).packet_ms == 100
    # no stated step, nothing refused: as asked
    assert packet_ms(100, 16000, step_ms=None).packet_ms == 100


def test_a_refusal_teaches_the_limit_when_no_step_is_stated() -> None:
    decided = packet_ms(100, 16000, step_ms=None, max_samples=1280)
    assert decided.packet_ms == 40
    assert decided.note is not None and "refused appends over 1280 samples" in decided.note
    assert packet_ms(100, 16000, step_ms=50).packet_ms == 25
    # no sub-frame length is a whole number of samples at the rate: kept as asked
    assert packet_ms(100, 44100, step_ms=50).packet_ms == 100


def test_capabilities_and_refusals_are_read_from_the_wire() -> None:
    assert frame_ms({"chunk_period_ms": 80}) == 80
    assert frame_ms({"chunk_period_ms": True}) is None
    assert frame_ms({}) is None
    message = "Nemotron VoiceChat Realtime append must contain at most 1280 samples"
    refusal = {"type": "error", "error": {"code": "bad_event", "message": message}}
    assert refused_samples(parse_error(refusal)) == 1280
    other = {"type": "error", "error": {"code": "bad_audio", "message": message}}
    assert refused_samples(parse_error(other)) is None
    cs = ClientSession()
    cs.on_frame({"type": "error", "error": {"code": "bad_event", "message": message}}, 1)
    assert cs.max_append_samples == 1280
    assert cs.packet_ms(100, 16000).packet_ms == 40


def test_retime_keeps_the_timeline_and_the_schedule() -> None:
    t = [1000.0]
    pacer = Pacer(100, 16000, pace=Pace.REALTIME, clock=lambda: t[0])
    pacer.start()
    first = pacer.take()
    assert first is not None and (first.audio_start_ms, first.audio_end_ms) == (0.0, 100.0)
    pacer.retime(40)
    chunks = [pacer.take() for _ in range(3)]
    assert [(c.audio_start_ms, c.audio_end_ms) for c in chunks if c] == [
        (100.0, 140.0),
        (140.0, 180.0),
        (180.0, 220.0),
    ]
    assert [c.scheduled for c in chunks if c] == pytest.approx([1000.1, 1000.14, 1000.18])
    assert all(c.samples.size == 640 for c in chunks if c)
    with pytest.raises(ValueError, match="whole number of samples"):
        pacer.retime(0)
