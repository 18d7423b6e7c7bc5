"""Frame accounting's arithmetic (duplexctl/protocol/frames.py), and when the client state
shows it: counted the way vLLM-Omni 0.30's Nemotron frame buffer cuts input into 80 ms
frames (docs/metrics.md "Frame accounting")."""

from __future__ import annotations

import json

import pytest

from duplexctl.protocol.client_state import ClientSession
from duplexctl.protocol.frames import FrameLedger


def test_sub_frame_packets_add_up_to_whole_frames_exactly() -> None:
    ledger = FrameLedger(80)
    for _ in range(7):  # 7 × 40 ms: three frames and a half pending
        ledger.sent(40)
    assert ledger.frames_sent == 3
    ledger.committed()  # the half frame is padded into a frame of its own
    assert (ledger.frames_sent, ledger.commits_padded) == (4, 1)
    ledger.committed()  # nothing pending: vLLM-Omni makes no frame of it
    assert (ledger.frames_sent, ledger.commits_padded) == (4, 1)
    ledger.sent(20)
    ledger.cleared()  # input_audio_buffer.clear discards the partial frame
    ledger.sent(60)
    assert ledger.frames_sent == 4
    for _ in range(3):  # 1/3 ms steps must not drift: whole µs are counted
        ledger.sent(80 / 3)
    assert ledger.frames_sent == 5


@pytest.mark.parametrize(
    ("sent_ms", "received", "deficit", "inserted", "coverage"),
    [
        (800, 10, 0, 0, 1.0),
        (800, 7, 3, 0, 0.7),
        (800, 12, 0, 2, 1.2),
        (0, 0, 0, 0, None),
    ],
)
def test_deficit_inserted_and_coverage(
    sent_ms: float, received: int, deficit: int, inserted: int, coverage: float | None
) -> None:
    ledger = FrameLedger(80)
    ledger.sent(sent_ms)
    for _ in range(received):
        ledger.received(80)
    assert (ledger.deficit, ledger.inserted, ledger.coverage) == (deficit, inserted, coverage)
    assert ledger.balanced == (deficit == 0)
    block = ledger.to_json()
    assert block["frame_deficit"] == deficit and block["frames_inserted"] == inserted


def frame(kind: str, seq: int, **fields: object) -> str:
    return json.dumps({"type": kind, "server_event_seq": seq, **fields})


def created(chunk_period_ms: int) -> str:
    capabilities = {
        "implementation_level": "model_native_duplex",
        "chunk_period_ms": chunk_period_ms,
    }
    return frame("session.created", 1, session={"id": "s1", "capabilities": capabilities})


def test_the_client_shows_frames_only_once_the_lane_proved_frame_locked() -> None:
    """A lane with a step whose first response opens with silence packets answers every
    frame (Nemotron): accounted, from the first append on. A lane with a step that speaks
    only when it has something to say (MiniCPM-o's 1 s units) has no frames to account."""
    cs = ClientSession(output_rate=22050)
    cs.on_message(created(80), 1)
    cs.input_sent(40)
    cs.input_sent(40)
    assert cs.frames is None  # not yet known to stream silence
    silence = "AAAA" * 1176  # 80 ms of pcm16 zeros at 22.05 kHz (3 528 bytes), base64
    for seq in (2, 3):
        cs.on_message(
            frame("response.output_audio.delta", seq, response_id="r1", delta=silence,
                  format="pcm16", sample_rate_hz=22050),
            seq,
        )  # fmt: skip
    frames = cs.frames
    assert frames is not None and cs.continuous_output
    assert (frames.frames_sent, frames.frames_received) == (1, 2)

    other = ClientSession()
    other.on_message(created(1000), 1)
    other.input_sent(1000)
    assert other.frames is None
