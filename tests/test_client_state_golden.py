"""ClientSession digests every golden transcript recorded from the real vLLM-Omni 0.30.0 server.

Each file's ``dir == "in"`` frames are fed, per session, in the recorded order with receive
times from ``t_ms``; a resumed connection is fed into the same ClientSession (that is what a
resume is), a second client's connection into its own. The invariant checker must report
zero violations on all of them: they are the reference behaviour of a correct server.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from duplexctl.protocol import names
from duplexctl.protocol.client_state import (
    AnswerEnded,
    AnswerStarted,
    AudioDelta,
    ClientSession,
    ErrorReceived,
    FunctionCall,
    Happening,
    Listen,
    ResponseDone,
    ResponseSpeak,
    ResyncRequired,
    SessionClosed,
    SessionCreated,
    SessionReplaced,
    SessionResumed,
    SpeechStarted,
    TranscriptDelta,
)

WIRE_DIR = Path(__file__).parent / "fixtures" / "wire"
ALL_FILES = sorted(p.stem for p in WIRE_DIR.glob("*.jsonl"))

# Which connections belong to one client session (resumes share it); default: one per conn.
SESSIONS: dict[str, list[list[int]]] = {
    "resume": [[1, 2]],
    "commit_at_drop": [[1, 2, 3, 4, 5]],
    "resume_expired": [[1, 2]],
    "idle_timeout": [[1, 2]],
    "journal_gap": [[1, 2, 3, 4]],
    "resume_takeover": [[1, 2], [3]],  # conn 3 replays the superseded token: its own client
}

Feed = list[Happening]


def feed(lines: list[dict[str, Any]], conns: list[int], cs: ClientSession) -> Feed:
    """Feed the server frames of ``conns`` in recorded order; a new conn = a new socket."""
    out: Feed = []
    current: int | None = None
    for line in lines:
        if line["dir"] != "in" or line["conn"] not in conns:
            continue
        if line["conn"] != current:
            current = line["conn"]
            cs.begin_connection()
        out.extend(cs.on_frame(line["frame"], int(line["t_ms"] * 1_000_000)))
    return out


def sessions_of(name: str, lines: list[dict[str, Any]]) -> list[list[int]]:
    if name in SESSIONS:
        return SESSIONS[name]
    return [[c] for c in sorted({line["conn"] for line in lines})]


def digest(
    name: str, load_wire: Callable[[str], list[dict[str, Any]]]
) -> list[tuple[ClientSession, Feed]]:
    lines = load_wire(name)
    result = []
    for conns in sessions_of(name, lines):
        if name == "resume_takeover" and conns == [3]:
            resume = next(
                line["frame"] for line in lines if line["conn"] == 3 and line["dir"] == "out"
            )
            cs = ClientSession.resuming(
                resume["session_id"],
                resume["resume_token"],
                resume["last_received_server_event_seq"],
            )
        else:
            cs = ClientSession()
        result.append((cs, feed(lines, conns, cs)))
    return result


def of(happenings: Feed, kind: type[Happening]) -> list[Any]:
    return [h for h in happenings if isinstance(h, kind)]


@pytest.mark.parametrize("name", ALL_FILES)
def test_every_transcript_digests_without_violations(name: str, load_wire: Any) -> None:
    assert len(ALL_FILES) == 25
    nemotron = name.startswith("nemotron_")
    for cs, happenings in digest(name, load_wire):
        assert happenings, f"{name}: no happenings"
        assert cs.checker.violations == [], f"{name}: {cs.checker.violations}"
        assert cs.seq_gaps == 0 and cs.duplicates_dropped == 0
        # Nemotron streams one packet per frame, silence included: its lane is continuous
        assert cs.continuous_output is nemotron
        for delta in of(happenings, AudioDelta):
            assert delta.decode_error is None
            rate = 22050 if nemotron else 24000
            assert delta.format == "pcm16" and delta.sample_rate_hz == rate
            # the recording cut each audible chunk's base64 to 4000 chars (3000 bytes), a
            # silent one of Nemotron's to 128 (96 bytes)
            assert len(delta.pcm) == (3000 if delta.audible else 96)
            assert delta.audible or nemotron


def single(name: str, load_wire: Any) -> tuple[ClientSession, Feed]:
    [(cs, happenings)] = digest(name, load_wire)
    return cs, happenings


def test_commit_turn(load_wire: Any) -> None:
    cs, hs = single("commit_turn", load_wire)
    assert cs.session_id and cs.session_id.startswith("duplex-")
    assert cs.resume_token and cs.attachment_generation == 1
    assert cs.capabilities["supports_session_resume"] is True
    [track] = cs.responses.values()
    assert (track.status, track.reason) == ("completed", "stop")
    assert track.audio_deltas == 10 and track.audio_ms == 2000.0
    assert track.first_chunk_ms == 200.0 and len(track.chunk_gaps_ms) == 9
    assert track.epoch == 0
    # text came before response.speak, which came before the first audio delta
    assert track.first_text_ns is not None and track.speak_ns is not None
    assert track.created_ns < track.first_text_ns < track.speak_ns <= track.first_audio_ns
    assert track.first_audio_ns < track.last_audio_ns <= track.done_ns
    assert track.transcript == "This is the fake vLLM-Omni peer answering turn 0 (epoch 0)."
    deltas = of(hs, AudioDelta)
    assert [d.audio_end_ms for d in deltas] == [200.0 * k for k in range(1, 11)]
    assert deltas[-1].end_of_turn and not deltas[0].end_of_turn
    standalone = [t for t in of(hs, TranscriptDelta) if t.standalone]
    assert len(standalone) == 1 and standalone[0].delta.startswith("This is")
    [done] = of(hs, ResponseDone)
    assert done.track is track
    listens = of(hs, Listen)
    assert listens and all(
        beat.response_id is None and beat.reason == "silence_or_noise" for beat in listens
    )
    assert of(hs, SessionClosed)[0].reason == "client_close"
    assert cs.closed and cs.pending_ack() is None
    assert cs.checker.finish() == []


def test_cancel(load_wire: Any) -> None:
    cs, _ = single("cancel", load_wire)
    [track] = cs.responses.values()
    assert (track.status, track.reason) == ("cancelled", "client_cancelled")
    assert track.audio_deltas == 1
    assert cs.epoch == 1  # the cancellation record states the new epoch


def test_server_vad_barge_in(load_wire: Any) -> None:
    cs, hs = single("server_vad_barge_in", load_wire)
    first, second = (cs.responses[rid] for rid in cs.response_order)
    assert (first.status, first.reason, first.epoch) == ("cancelled", "turn_detected", 0)
    assert (second.status, second.reason, second.epoch) == ("completed", "stop", 1)
    assert second.audio_deltas == 10 and second.audio_ms == 2000.0
    barge = [d for d in hs if getattr(d, "action", None) == "barge_in"]
    assert len(barge) == 1 and barge[0].cancel_reason == "turn_detected"
    # everything the first response sent before the cancel; nothing leaked after its done
    assert first.audio_ms_after(first.done_ns) == 0.0
    assert cs.epoch == 1


def test_server_vad_turn(load_wire: Any) -> None:
    cs, hs = single("server_vad_turn", load_wire)
    assert of(hs, SpeechStarted)[0].audio_start_ms == 52
    [track] = cs.responses.values()
    assert track.status == "completed" and track.audio_ms == 2000.0


def test_resume_across_connections(load_wire: Any) -> None:
    [(cs, hs)] = digest("resume", load_wire)
    lines = load_wire("resume")
    old_token = next(
        line["frame"]["resume_token"]
        for line in lines
        if line["dir"] == "out" and line["frame"].get("type") == "session.resume"
    )
    [resumed] = of(hs, SessionResumed)
    assert resumed.attachment_generation == 2 and cs.attachment_generation == 2
    assert cs.resume_token == resumed.resume_token != old_token  # rotated
    assert cs.seq_gaps == 0 and cs.duplicates_dropped == 0
    [track] = cs.responses.values()
    assert track.status == "completed" and track.audio_deltas == 10 and track.audio_ms == 2000.0


def test_resume_replay_duplicates_are_dropped(load_wire: Any) -> None:
    """A server that replays from below what we processed: the overlap is dropped."""
    lines = load_wire("resume")
    cs = ClientSession()
    feed(lines, [1], cs)
    last_three = [
        line["frame"]
        for line in lines
        if line["dir"] == "in" and line["conn"] == 1 and "server_event_seq" in line["frame"]
    ][-3:]
    cs.begin_connection()
    for frame in last_three:
        assert cs.on_frame(frame, 10**12) == []
    rest = feed(lines, [2], cs)
    assert rest and cs.duplicates_dropped == 3 and cs.seq_gaps == 0
    assert cs.checker.violations == []


def test_resume_event_names_last_processed_seq(load_wire: Any) -> None:
    lines = load_wire("resume")
    cs = ClientSession()
    feed(lines, [1], cs)
    event = cs.resume()
    recorded = next(
        line["frame"]
        for line in lines
        if line["dir"] == "out" and line["frame"].get("type") == "session.resume"
    )
    assert event["last_received_server_event_seq"] == recorded["last_received_server_event_seq"]
    assert event["session_id"] == recorded["session_id"]
    assert event["resume_token"] == recorded["resume_token"]


def test_admission_reject(load_wire: Any) -> None:
    first, rejected, third = digest("admission_reject", load_wire)
    [err] = of(rejected[1], ErrorReceived)
    assert err.error.is_capacity and err.error.advertised_limit == 1
    assert err.seq is None and not rejected[0].created
    assert first[0].closed and third[0].closed


def test_journal_gap(load_wire: Any) -> None:
    [(cs, hs)] = digest("journal_gap", load_wire)
    [resync] = of(hs, ResyncRequired)
    assert resync.reason == "journal_gap"
    codes = [e.error.code for e in of(hs, ErrorReceived)]
    assert codes == ["session_resume_conflict"]
    assert len(of(hs, SessionResumed)) == 1 and cs.closed


def test_resume_failures_are_fatal_codes(load_wire: Any) -> None:
    [(_, hs)] = digest("resume_expired", load_wire)
    [err] = of(hs, ErrorReceived)
    assert err.error.code == "session_resume_expired" in names.FATAL_RESUME_CODES
    (_, old), (_, intruder) = digest("resume_takeover", load_wire)
    assert of(old, SessionReplaced)[0].attachment_generation == 1
    [err] = of(intruder, ErrorReceived)
    assert err.error.code == "invalid_resume_token" in names.FATAL_RESUME_CODES


def test_open_rejected_and_timeouts(load_wire: Any) -> None:
    codes = [of(hs, ErrorReceived)[0].error for _, hs in digest("open_rejected", load_wire)]
    assert [e.code for e in codes] == [
        "invalid_session_config",
        "invalid_duplex_runtime_config",
        "invalid_session_config",
        "invalid_json",
        "unsupported",
    ]
    assert codes[-1].flat and not any(e.is_capacity for e in codes)
    _, hs = single("config_timeout", load_wire)
    assert of(hs, ErrorReceived)[0].error.code == "config_timeout"


def test_autostart_typeless_first_frame_error_precedes_created(load_wire: Any) -> None:
    *_, (cs, hs) = digest("autostart_model", load_wire)
    assert isinstance(hs[0], ErrorReceived) and hs[0].error.code == "bad_event"
    assert isinstance(hs[1], SessionCreated)
    assert cs.checker.violations == []


def test_bad_input_errors_are_received(load_wire: Any) -> None:
    (cs, hs), _ = digest("bad_input", load_wire)
    errors = of(hs, ErrorReceived)
    sequenced = [e.error.code for e in errors if e.seq is not None]
    assert sequenced == ["bad_audio", "input_backpressure"]
    assert "event_too_large" in [e.error.code for e in errors]
    assert cs.closed


def test_overlap_commit_and_text_turns(load_wire: Any) -> None:
    cs, hs = single("turn_overlap_commit", load_wire)
    assert [t.status for t in cs.responses.values()] == ["completed", "completed"]
    assert "response_already_active" in [e.error.code for e in of(hs, ErrorReceived)]
    second = cs.responses[cs.response_order[1]]
    # promoted turn: speak came before the text
    assert second.speak_ns is not None and second.speak_ns <= second.first_text_ns
    cs, hs = single("text_item_turn", load_wire)
    assert [t.status for t in cs.responses.values()] == ["completed"]
    assert len(of(hs, ResponseSpeak)) == 1


def test_session_update_epochs(load_wire: Any) -> None:
    cs, _ = single("session_update", load_wire)
    assert cs.epoch == 2  # input.cancel and barge_in advanced it with nothing running


def test_item_truncate_is_clamped_to_received_audio(load_wire: Any) -> None:
    cs, _ = single("item_truncate", load_wire)
    [rid] = cs.response_order
    event = cs.item_truncate(f"item_{rid}", 999_999)
    assert event["audio_end_ms"] == 2000 and event["content_index"] == 0
    assert cs.item_truncate(f"item_{rid}", 700)["audio_end_ms"] == 700


def test_truncated_payload_at_odd_boundary_still_decodes() -> None:
    """A payload cut mid-quantum decodes its prefix and is flagged, not a crash."""
    cs = ClientSession()
    cs.on_frame({"type": "session.created", "session": {"id": "duplex-x"}}, 0)
    pcm = b"\x01\x00" * 600
    payload = base64.b64encode(pcm).decode()[:1001]
    [delta] = cs.on_frame(
        {
            "type": "response.output_audio.delta",
            "response_id": "resp-duplex-x-0-aa",
            "delta": payload,
            "format": "pcm16",
            "sample_rate_hz": 24000,
        },
        1,
    )
    assert isinstance(delta, AudioDelta) and len(delta.pcm) == 750
    assert delta.decode_error is not None


# -- Nemotron VoiceChat: a lane that streams silence too (docs/protocol.md §13) ---------------


def answers(hs: Feed) -> list[tuple[str, str, int]]:
    """(kind, response id, recv ms) of every AnswerStarted / AnswerEnded, in order."""
    return [
        (h.type, h.response_id, h.recv_ns // 1_000_000)
        for h in hs
        if isinstance(h, (AnswerStarted, AnswerEnded))
    ]


def test_nemotron_answer_is_found_in_the_text_and_audio(load_wire: Any) -> None:
    cs, hs = single("nemotron_plain", load_wire)
    assert cs.continuous_output and cs.packet_ms(100, 16000).packet_ms == 40
    first, second = (cs.responses[rid] for rid in cs.response_order)
    # the first response opened at 398 ms, with silence, long before the model spoke ...
    assert first.created_ns // 1_000_000 == 398 and first.first_audio_ns < first.first_text_ns
    # ... its answer starts with the first non-empty transcript delta ("This", 4997 ms) and
    # ends with its response.done (7039 ms); the second response never speaks
    assert answers(hs) == [
        ("answer.started", first.response_id, 4997),
        ("answer.ended", first.response_id, 7039),
    ]
    assert first.answer_end_by == "response.done"
    assert first.first_audible_ns // 1_000_000 == 5196 and first.speech_start_ms == 6320
    assert first.transcript.startswith("This is the fake vLLM-Omni peer")
    audible = [d for d in of(hs, AudioDelta) if d.audible]
    assert {d.response_id for d in audible} == {first.response_id}
    assert second.first_audible_ns is None and second.answer_start_ns is None


def test_nemotron_tool_call_is_a_call_not_an_answer(load_wire: Any) -> None:
    for name in ("nemotron_tool", "nemotron_tool_40ms"):
        cs, hs = single(name, load_wire)
        [call] = of(hs, FunctionCall)
        assert (call.name, call.arguments) == ("get_weather", '{"city":"Paris"}')
        assert call.call_id.startswith("call_") and call.response_id.startswith("resp_")
        assert cs.responses[call.response_id].kind == "function_call"
        # the answer comes after the output, inside the audio response that stayed open
        [(_, rid, started), (_, rid2, _ended)] = answers(hs)
        assert rid == rid2 != call.response_id and started * 1_000_000 > call.recv_ns
        assert "get_weather returned" in cs.responses[rid].transcript


def test_nemotron_barge_in_is_the_model_ending_its_turn(load_wire: Any) -> None:
    cs, _ = single("nemotron_bargein", load_wire)
    spoken = [cs.responses[rid] for rid in cs.response_order if cs.responses[rid].answer_start_ns]
    assert len(spoken) == 2  # the interrupted answer, then the answer to the interruption
    cut, answer = spoken
    assert (cut.status, cut.reason) == ("completed", "stop")
    assert len(cut.transcript) < len(answer.transcript)
    assert cs.epoch == 0  # no cancel: no new epoch


def test_nemotron_cancel_starts_a_new_epoch(load_wire: Any) -> None:
    cs, _ = single("nemotron_cancel", load_wire)
    cancelled = [t for t in cs.responses.values() if t.status == "cancelled"]
    assert [(t.reason, t.answer_end_by) for t in cancelled] == [
        ("client_cancelled", "response.done")
    ]
    assert cs.epoch == 1
    assert any("epoch 1" in t.transcript for t in cs.responses.values())


def test_an_answer_ends_after_a_second_of_silence_unless_its_text_goes_on() -> None:
    """docs/protocol.md §13.2: without a response.done, a second of silent packets after the
    model's voice ends its answer; text still arriving means it is still answering."""

    def packets(
        cs: ClientSession, rid: str, t0: int, n: int, *, audible: bool, text: str = ""
    ) -> list[Happening]:
        out: list[Happening] = []
        level = 3000 if audible else 0
        pcm16 = (level).to_bytes(2, "little", signed=True) * 1764
        for k in range(n):
            t = t0 + k * 80
            delta = {
                "type": "response.output_audio.delta", "response_id": rid,
                "delta": base64.b64encode(pcm16).decode(), "sample_rate_hz": 22050,
            }  # fmt: skip
            out += cs.on_frame(delta, t * 1_000_000)
            if text:
                transcript = {"type": names.TRANSCRIPT_DELTA, "response_id": rid, "delta": text}
                out += cs.on_frame(transcript, t * 1_000_000 + 1)
        return out

    for text, ended in (("", True), (" word", False)):
        cs = ClientSession()
        cs.on_frame(
            {
                "type": "session.created",
                "session": {"capabilities": {"implementation_level": "model_native_duplex"}},
            },
            0,
        )
        rid = "resp-duplex-" + "a" * 32 + "-0-00000001"
        hs = packets(cs, rid, 0, 3, audible=False)  # a response that opens with silence
        assert cs.continuous_output
        hs += packets(cs, rid, 240, 10, audible=True, text=" hello")
        hs += packets(cs, rid, 1040, 14, audible=False, text=text)  # 1120 ms of silence
        ends = [h for h in hs if isinstance(h, AnswerEnded)]
        assert [h.by for h in ends] == (["silence"] if ended else [])
