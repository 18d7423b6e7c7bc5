"""Synthetic frames: every invariant violation is detected; builders, acks and decoding."""

from __future__ import annotations

import base64
import io
import re
import wave
from typing import Any

import numpy as np
import pytest

from duplexctl.audio import pcm
from duplexctl.protocol.client_state import (
    AudioDelta,
    ClientSession,
    Malformed,
    SessionStateError,
)
from duplexctl.protocol.invariants import InvariantChecker

SID = "duplex-" + "a" * 32
RID = f"resp-{SID}-0-0000abcd"
RID1 = f"resp-{SID}-1-0000beef"


class Feeder:
    """Numbers sequenced frames automatically unless told otherwise."""

    def __init__(self, cs: ClientSession | None = None) -> None:
        self.cs = cs or ClientSession()
        self.seq = 0
        self.t = 0

    def __call__(self, frame: dict[str, Any], *, seq: bool | int = True) -> list[Any]:
        frame = dict(frame)
        if seq is True:
            self.seq += 1
            frame["server_event_seq"] = self.seq
        elif isinstance(seq, int) and not isinstance(seq, bool):
            frame["server_event_seq"] = seq
        self.t += 1_000_000
        return self.cs.on_frame(frame, self.t)

    def open(self) -> Feeder:
        self({"type": "session.created", "session": {"id": SID}, "resume_token": "tok"}, seq=False)
        self({"type": "session.updated", "session": {"id": SID}})
        return self

    def names(self) -> list[str]:
        return [v.name for v in self.cs.checker.violations]


def audio(rid: str = RID, *, epoch: int | None = 0, data: bytes = b"\0\0" * 480, **kw: Any) -> dict:
    frame: dict[str, Any] = {
        "type": "response.output_audio.delta",
        "response_id": rid,
        "delta": base64.b64encode(data).decode(),
        "format": "pcm16",
        "sample_rate_hz": 24000,
    }
    if epoch is not None:
        frame["metadata"] = {"epoch": epoch}
    frame.update(kw)
    return frame


def created(rid: str = RID) -> dict:
    return {"type": "response.created", "response_id": rid, "response": {"id": rid}}


def done(rid: str = RID, status: str = "completed", reason: str = "stop", **meta: Any) -> dict:
    return {
        "type": "response.done",
        "response_id": rid,
        "response": {
            "id": rid,
            "status": status,
            "status_details": {"type": status, "reason": reason},
            "metadata": meta,
        },
    }


def test_clean_turn_has_no_violations() -> None:
    f = Feeder().open()
    f(created())
    f(audio())
    f({"type": "response.output_audio_transcript.delta", "response_id": RID, "delta": "hi"})
    f(done())
    f({"type": "session.closed", "reason": "client_close", "event": {}})
    assert f.names() == []
    track = f.cs.responses[RID]
    assert track.audio_ms == pytest.approx(20.0)  # 480 samples at 24 kHz, no metadata
    assert track.transcript == "hi" and track.first_text_ns is not None


def test_response_done_twice() -> None:
    f = Feeder().open()
    f(created())
    f(done())
    f(done())
    assert f.names() == ["duplicate_response_done"]


def test_response_done_without_created() -> None:
    f = Feeder().open()
    f(done())
    assert f.names() == ["response_done_without_created"]


def test_response_created_twice() -> None:
    f = Feeder().open()
    f(created())
    f(created())
    assert f.names() == ["duplicate_response_created"]


def test_delta_after_done() -> None:
    f = Feeder().open()
    f(created())
    f(done())
    f(audio())
    f({"type": "response.output_audio_transcript.delta", "response_id": RID, "delta": ""})
    assert f.names() == ["delta_after_response_done", "delta_after_response_done"]
    assert f.cs.checker.violations[0].response_id == RID


def test_old_epoch_delta_after_epoch_advanced() -> None:
    f = Feeder().open()
    f(created())
    f(audio(epoch=0))
    f({"type": "response.listen", "epoch": 1, "response": {"metadata": {"reason": "x"}}})
    f(audio(epoch=0))
    assert f.names() == ["old_epoch_delta"]


def test_old_epoch_known_from_response_id_and_cancel_record() -> None:
    f = Feeder().open()
    f(created())
    f(done(status="cancelled", reason="client_cancelled", epoch=1, cancelled_epoch=0))
    assert f.cs.epoch == 1
    f(created(RID1))
    # a transcript delta of the old response: no metadata, epoch from its id (0)
    f({"type": "response.output_audio_transcript.delta", "response_id": RID, "delta": "late"})
    assert f.names() == ["delta_after_response_done", "old_epoch_delta"]


def test_seq_gap_detected_and_counted() -> None:
    f = Feeder().open()
    f({"type": "session.heartbeat_ack"}, seq=5)
    assert f.names() == ["seq_gap"]
    assert f.cs.seq_gaps == 1 and f.cs.missing_events == 3 and f.cs.last_seq == 5


def test_duplicates_on_a_live_connection_are_dropped_and_are_violations() -> None:
    """docs/protocol.md §6.6: seqs only grow; a seq at or below one processed on a live
    connection is a server bug (issue 16.1), dropped with the frame as evidence."""
    f = Feeder().open()
    f({"type": "session.heartbeat_ack"})
    assert f({"type": "session.heartbeat_ack"}, seq=2) == []
    assert f({"type": "session.updated", "session": {}}, seq=1) == []
    assert f.cs.duplicates_dropped == 2
    assert f.names() == ["seq_out_of_order", "seq_out_of_order"]
    first = f.cs.checker.violations[0]
    assert first.seq == 2 and first.frame is not None and "heartbeat_ack" in first.frame


def test_overlap_in_a_resume_replay_is_dropped_without_violation() -> None:
    """The client de-duplicates a replay that starts below what it processed (§6.6)."""
    f = Feeder().open()
    f({"type": "session.heartbeat_ack"})
    f.cs.begin_connection()  # a resume
    f({"type": "session.resumed", "session": {"id": SID}, "resume_token": "t2"}, seq=False)
    assert f({"type": "session.heartbeat_ack"}, seq=2) == []  # replayed overlap
    f({"type": "session.heartbeat_ack"}, seq=3)  # new: the replay overlap is over
    assert f({"type": "session.heartbeat_ack"}, seq=3) == []
    assert f.cs.duplicates_dropped == 2 and f.names() == ["seq_out_of_order"]


def test_event_before_session_created() -> None:
    f = Feeder()
    f({"type": "session.updated", "session": {}})
    assert f.names() == ["event_before_session_created"]


def test_unsequenced_error_before_created_is_allowed() -> None:
    f = Feeder()
    f(
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "code": "bad_event",
                "message": "Duplex event missing string type",
            },
        },
        seq=False,
    )
    f.open()
    assert f.names() == []


def test_session_created_twice() -> None:
    f = Feeder().open()
    f({"type": "session.created", "session": {"id": SID}}, seq=False)
    assert f.names() == ["duplicate_session_created"]


def test_session_closed_must_be_last_and_unique() -> None:
    f = Feeder().open()
    f({"type": "session.closed", "reason": "client_close"})
    f({"type": "session.heartbeat_ack"})
    f({"type": "session.closed", "reason": "client_close"})
    assert f.names() == ["event_after_session_closed", "duplicate_session_closed"]


def test_open_response_at_close_is_reported_not_a_violation() -> None:
    f = Feeder().open()
    f(created())
    f(audio())
    f({"type": "session.closed", "reason": "client_close"})
    assert f.names() == []
    assert f.cs.checker.open_at_close == [RID] and f.cs.checker.finish() == [RID]


def test_audio_that_does_not_decode_as_stated() -> None:
    f = Feeder().open()
    f(created())
    f(audio(delta="@@not base64@@"))
    f(audio(data=b"\0\0\0"))  # odd pcm16
    f(audio(format="mp3"))
    assert f.names() == ["audio_decode"] * 3
    assert f.cs.responses[RID].decode_errors == 3


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.float_to_pcm16(samples))
    return out.getvalue()


def test_wav_wrapped_delta_decodes_to_its_pcm() -> None:
    tone = (0.3 * np.sin(np.arange(2400) * 2 * np.pi * 440 / 24000)).astype(np.float32)
    f = Feeder().open()
    f(created())
    [delta] = f(audio(data=wav_bytes(tone, 24000), format="wav"))
    assert isinstance(delta, AudioDelta) and delta.decode_error is None
    assert delta.pcm == pcm.float_to_pcm16(tone)
    assert delta.audio_end_ms == pytest.approx(100.0)
    [bad] = f(audio(data=wav_bytes(tone, 16000), format="wav"))
    assert bad.decode_error and "16000" in bad.decode_error
    assert f.names() == ["audio_decode"]


def test_g711_delta_is_converted_to_pcm16() -> None:
    tone = (0.3 * np.sin(np.arange(800) * 2 * np.pi * 440 / 8000)).astype(np.float32)
    f = Feeder().open()
    [delta] = f(audio(data=pcm.float_to_ulaw(tone), format="g711_ulaw", sample_rate_hz=8000))
    assert delta.decode_error is None and len(delta.pcm) == 1600
    assert delta.audio_end_ms == pytest.approx(100.0)


def test_beta_audio_names_are_accepted() -> None:
    f = Feeder().open()
    f(created())
    [delta] = f(audio(type="response.audio.delta"))
    assert isinstance(delta, AudioDelta) and delta.type == "response.output_audio.delta"


def test_unknown_events_are_tolerated() -> None:
    f = Feeder().open()
    [other] = f({"type": "duplex.something_new", "event": {"x": 1}})
    assert other.type == "duplex.something_new" and f.names() == []
    [typeless] = f({"no": "type"}, seq=False)
    assert isinstance(typeless, Malformed) and typeless.type == "<missing type>"
    assert typeless.problems == ["type is missing"] and f.names() == ["malformed_event"]


def test_acks_never_exceed_processed() -> None:
    f = Feeder().open()
    assert f.cs.pending_ack() == 1
    f({"type": "session.heartbeat_ack"})
    assert f.cs.pending_ack() == 2
    assert f.cs.event_ack()["server_event_seq"] == 2
    assert f.cs.event_ack(99)["server_event_seq"] == 2
    f.cs.mark_acked(2)
    assert f.cs.pending_ack() is None


EVENT_ID = re.compile(r"^evt_[0-9a-f]{32}$")


def test_builders_stamp_event_ids_and_shapes() -> None:
    cs = Feeder().open().cs
    events = [
        cs.session_update({"model": "m"}),
        cs.append(b"\x01\x00" * 4, audio_start_ms=0, audio_end_ms=100, duration_ms=100),
        cs.commit(response_create=True),
        cs.response_create(),
        cs.response_cancel(RID),
        cs.input_audio_buffer_clear(),
        cs.output_audio_buffer_clear(),
        cs.barge_in(),
        cs.playback_ack(RID, 199.7),
        cs.item_truncate(f"item_{RID}", 500),
        cs.text_item("hello"),
        cs.heartbeat(),
        cs.event_ack(),
        cs.close(),
        cs.resume(),
    ]
    assert all(EVENT_ID.match(e["event_id"]) for e in events)
    assert len({e["event_id"] for e in events}) == len(events)
    append = events[1]
    assert base64.b64decode(append["audio"]) == b"\x01\x00" * 4
    assert (append["audio_start_ms"], append["audio_end_ms"], append["duration_ms"]) == (
        0,
        100,
        100,
    )
    assert events[2] == {**events[2], "final": True, "response_create": True}
    assert events[3]["response"] == {}
    assert "response_id" not in events[6]
    ack = events[8]
    assert (ack["item_id"], ack["played_ms"], ack["committed_ms"]) == (f"item_{RID}", 199, 199)
    assert events[9]["audio_end_ms"] == 500  # unknown response: nothing to clamp against
    assert events[13]["reason"] == "client_close"
    resume = events[14]
    assert (resume["session_id"], resume["resume_token"]) == (SID, "tok")
    assert resume["last_received_server_event_seq"] == 1


def test_resume_needs_credentials() -> None:
    with pytest.raises(SessionStateError):
        ClientSession().resume()


def test_resuming_session_starts_at_given_seq() -> None:
    cs = ClientSession.resuming(SID, "tok", 7)
    assert cs.resume()["last_received_server_event_seq"] == 7
    cs.begin_connection()
    cs.on_frame(
        {
            "type": "session.resumed",
            "session_id": SID,
            "resume_token": "new",
            "attachment_generation": 2,
            "session": {},
        },
        1,
    )
    assert cs.on_frame({"type": "session.heartbeat_ack", "server_event_seq": 7}, 2) == []
    cs.on_frame({"type": "session.heartbeat_ack", "server_event_seq": 8}, 3)
    cs.on_frame(done(), 4)  # its response began before we attached: unknown, not a violation
    assert cs.resume_token == "new" and cs.checker.violations == []


def test_checker_can_be_fed_directly() -> None:
    checker = InvariantChecker()
    assert checker.counts() == {} and checker.open_responses == []
