"""EngineSession unit tests without sockets: the turn lane, responses and the cancel family."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest
from support.engine import OPEN_TURN, Harness, pcm16, turn_config

from duplexctl.audio import pcm
from duplexctl.protocol.errors import ProtocolError
from duplexctl.server import translate
from duplexctl.server.config import Fault
from duplexctl.server.session import EngineSession, cut_transcript, validate_open

SPEECH = pcm16(100, level=0.3)
SILENCE = pcm16(100)
FANOUT_DONE = [
    "response.output_audio.done",
    "response.output_audio_transcript.done",
    "response.content_part.done",
    "response.output_item.done",
    "conversation.item.done",
    "response.done",
    "rate_limits.updated",
]


async def opened(**overrides: object) -> Harness:
    session = dict(OPEN_TURN)
    session.update(overrides.pop("session", {}))  # type: ignore[arg-type]
    h = Harness(turn_config(**overrides), session)
    h.start()
    return h


async def speak(h: Harness, n: int = 5) -> None:
    for _ in range(n):
        await h.send({"type": "input_audio_buffer.append", "audio": SPEECH})


async def answered_turn(h: Harness) -> str:
    await speak(h)
    await h.send({"type": "input_audio_buffer.commit", "response_create": True})
    await h.wait_for("response.done")
    return h.of("response.created")[-1]["response_id"]


# --- open / session object -----------------------------------------------------------------


def test_validate_open_codes() -> None:
    cfg = turn_config()
    with pytest.raises(ProtocolError) as exc:
        validate_open({"turn_detection": {"type": "semantic_vad"}}, cfg)
    assert (exc.value.code, exc.value.message) == (
        "invalid_session_config",
        "turn_detection.type must be 'server_vad'",
    )
    with pytest.raises(ProtocolError) as exc:
        validate_open({"input_audio_format": "mp3"}, cfg)
    assert exc.value.message == "Unsupported input_audio_format: mp3"
    with pytest.raises(ProtocolError) as exc:
        validate_open({"extra_body": {"auto_response": True}}, cfg)
    assert exc.value.code == "invalid_duplex_runtime_config"
    assert exc.value.message.startswith("Qwen requires server VAD or explicit commits")
    with pytest.raises(ProtocolError) as exc:
        validate_open({"overlap_policy": "barge_in_on_speech"}, cfg)
    assert exc.value.code == "invalid_session_config"
    with pytest.raises(ProtocolError):
        validate_open({"turn_detection": {"type": "server_vad", "eagerness": "low"}}, cfg)
    validate_open({"extra_body": {"auto_response": True}}, turn_config(model_profile="native"))


async def test_session_object_echo_rules() -> None:
    td = {"type": "server_vad", "silence_duration_ms": 800}
    h = await opened(
        session={"turn_detection": td, "playback_commit_policy": "commit_all_on_done", "foo": 1}
    )
    obj = h.session.session_object()
    assert obj["turn_detection"] == {
        "type": "server_vad",
        "interrupt_response": True,
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 800,
        "min_speech_duration_ms": 96,
    }
    assert obj["overlap_policy"] == "barge_in_on_speech"
    assert obj["playback_commit_policy"] == "ack_only"
    assert obj["foo"] == 1 and obj["sample_rate_hz"] == 16000
    assert "extra_body" not in obj and "use_tts_template" not in obj
    assert obj["capabilities"]["implementation_level"] == "turn_based_duplex"
    assert h.of("session.updated")[0]["session"]["id"] == h.session.id
    with_cr = Harness(
        turn_config(), {**OPEN_TURN, "turn_detection": {**td, "create_response": False}}
    )
    assert with_cr.session.session_object()["turn_detection"]["create_response"] is False


@pytest.mark.parametrize(("value", "expected"), [(0, 300.0), (3, 3.0), (-1, 42.0), (None, 300.0)])
async def test_receive_timeout(value: float | None, expected: float) -> None:
    obj = dict(OPEN_TURN, idle_timeout_s=value)
    h = Harness(turn_config(ws_idle_timeout_s=42.0), obj)
    assert h.session.receive_timeout_s == expected


async def test_native_capabilities() -> None:
    h = Harness(turn_config(model_profile="native"), {"extra_body": {"auto_response": True}})
    caps = h.session.capabilities
    assert caps["implementation_level"] == "model_native_duplex"
    assert caps["supports_model_native_turn_policy"] is True
    assert caps["supports_turn_commit_only"] is False
    assert caps["chunk_period_ms"] == 1000
    assert all(
        caps[k]
        for k in (
            "supports_barge_in",
            "supports_session_resume",
            "supports_audio_truncate",
            "supports_playback_ack",
            "supports_client_commit",
        )
    )


async def test_session_update_paths() -> None:
    h = await opened()
    exc = await h.send(
        {"type": "session.update", "session": {"turn_detection": {"type": "semantic_vad"}}}
    )
    assert exc is not None and exc.code == "unsupported_turn_detection"
    exc = await h.send({"type": "session.update", "session": {"input_audio_format": "mp3"}})
    assert exc is not None and exc.code == "unsupported_audio_format"
    await h.send({"type": "session.update", "session": {"model": "other"}, "event_id": "e1"})
    err = h.of("error")[-1]["error"]
    assert (err["code"], err["event_id"]) == ("model_update_unsupported", "e1")
    await h.send({"type": "session.update", "session": {"turn_detection": {"type": "server_vad"}}})
    assert h.of("session.updated")[-1]["session"]["overlap_policy"] == "barge_in_on_speech"
    await h.send({"type": "session.update", "session": {"idle_timeout_s": 5}})
    assert h.session.receive_timeout_s == 300.0


def test_every_command_type_has_one_handler() -> None:
    """The dispatch table covers exactly what the translator can produce."""
    h = Harness(turn_config(), OPEN_TURN)
    assert set(h.session._handlers) == translate.COMMAND_TYPES


# --- input -----------------------------------------------------------------------------------


async def test_silent_appends_get_beats_and_are_not_buffered() -> None:
    h = await opened()
    for _ in range(3):
        await h.send({"type": "input_audio_buffer.append", "audio": SILENCE})
    assert h.types()[1:] == ["response.listen"] * 3
    beat = h.events[-1]
    assert "response_id" not in beat and beat["session_id"] == h.session.id
    assert beat["response"]["metadata"] == {
        "type": "response.listen",
        "session_id": h.session.id,
        "epoch": 0,
        "reason": "silence_or_noise",
    }
    await h.send({"type": "input_audio_buffer.commit", "event_id": "c"})
    assert h.types()[-3:] == [
        "input_audio_buffer.committed",
        "conversation.item.done",
        "response.listen",
    ]
    assert h.of("input_audio_buffer.committed")[0]["event"]["empty"] is True


async def test_commit_fan_out_exact() -> None:
    h = await opened()
    await h.send({"type": "input_audio_buffer.append", "audio": SPEECH, "audio_start_ms": 40})
    started = h.events[-1]
    assert (
        started["type"] == "input_audio_buffer.speech_started" and started["audio_start_ms"] == 40
    )
    await speak(h, 2)
    await h.send({"type": "input_audio_buffer.commit", "final": True, "response_create": False})
    assert h.types()[-5:] == [
        "input_audio_buffer.speech_stopped",
        "conversation.item.added",
        "conversation.item.created",
        "input_audio_buffer.committed",
        "conversation.item.done",
    ]
    committed = h.of("input_audio_buffer.committed")[0]
    assert committed["item_id"] == started["item_id"] and committed["previous_item_id"] is None
    assert set(committed["event"]) >= {
        "type",
        "session_id",
        "turn_id",
        "epoch",
        "history_len",
        "native_audio",
        "message",
        "realtime_item_id",
    }
    assert h.of("input_audio_buffer.speech_stopped")[0]["audio_end_ms"] == 0


async def test_input_errors_and_formats() -> None:
    h = await opened()
    exc = await h.send({"type": "input_audio_buffer.append", "audio": "@@", "event_id": "x"})
    assert (
        exc is not None
        and exc.code == "bad_audio"
        and exc.message == "input audio is not valid base64"
    )
    exc = await h.send({"type": "input_audio_buffer.append"})
    assert (
        exc is not None
        and exc.message == "input_audio_buffer.append requires audio and/or video_frames"
    )
    exc = await h.send(
        {"type": "input_audio_buffer.append", "audio": SILENCE, "sample_rate_hz": 4000}
    )
    assert exc is not None and exc.code == "bad_event"
    exc = await h.send({"type": "input_audio_buffer.append", "audio": SILENCE, "format": "mp3"})
    assert exc is not None and exc.code == "unsupported_audio_format"
    await h.send({"type": "input_audio_buffer.append", "audio": "AQID", "event_id": "odd"})
    err = h.of("error")[-1]["error"]
    assert err == {
        "type": "invalid_request_error",
        "code": "bad_audio",
        "message": "input_audio_buffer.append pcm16 audio could not be decoded",
    }
    tone = (0.3 * np.sin(np.arange(4800) / 8)).astype(np.float32)
    for fmt, rate in (
        ("g711_ulaw", 8000),
        ("pcm_f32le", 48000),
        ("pcm16", 44100),
        ("g711_alaw", 8000),
    ):
        data = base64.b64encode(pcm.encode(tone, fmt)).decode()
        await h.send(
            {
                "type": "input_audio_buffer.append",
                "audio": data,
                "format": fmt,
                "sample_rate_hz": rate,
            }
        )
    assert len(h.of("input_audio_buffer.speech_started")) == 1
    await h.send({"type": "input.text.append", "text": "hi", "event_id": "t"})
    assert h.of("error")[-1]["error"]["code"] == "native_text_append_unsupported"


async def test_input_backpressure_counts_float32() -> None:
    h = await opened(max_pending_input_bytes=64_000)
    big = base64.b64encode(bytes(34_000)).decode()  # 17_000 samples -> 68_000 float32 bytes
    await h.send({"type": "input_audio_buffer.append", "audio": big, "event_id": "b"})
    err = h.of("error")[-1]["error"]
    assert (err["code"], err["type"], err["event_id"]) == (
        "input_backpressure",
        "rate_limit_error",
        "b",
    )
    h2 = await opened(max_pending_turns=1)
    await speak(h2, 2)
    await h2.send({"type": "input_audio_buffer.commit"})
    await speak(h2, 2)
    await h2.send({"type": "input_audio_buffer.commit"})
    assert h2.codes() == ["input_backpressure"]


async def test_clear_and_empty_buffer() -> None:
    h = await opened()
    await speak(h, 2)
    await h.send({"type": "input_audio_buffer.clear"})
    assert h.types()[-1] == "input_audio_buffer.cleared"
    assert not h.of("input_audio_buffer.speech_stopped")
    await h.send({"type": "input_audio_buffer.commit", "event_id": "c"})
    assert h.of("error")[-1]["error"]["event_id"] == "c"
    await h.send({"type": "response.create", "event_id": "r"})
    err = h.of("error")[-1]["error"]
    assert err["code"] == "response_create_without_input" and "event_id" not in err


# --- responses ---------------------------------------------------------------------------------


async def test_response_fan_out_order_and_fields() -> None:
    h = await opened(realtime_factor=0.0)
    rid = await answered_turn(h)
    types = h.types()
    start = types.index("response.created")
    assert types[start : start + 7] == [
        "response.created",
        "conversation.item.added",
        "conversation.item.created",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_audio_transcript.delta",
        "response.speak",
    ]
    assert types[-7:] == FANOUT_DONE
    deltas = h.of("response.output_audio.delta")
    assert len(deltas) == 10
    meta = deltas[-1]["metadata"]
    assert meta["end_of_turn"] is True and meta["audio_duration_ms"] == 2000
    assert meta["playback"] == {
        "generated_ms": 2000,
        "sent_ms": 2000,
        "played_ms": 0,
        "committed_ms": 0,
    }
    assert deltas[0]["format"] == "pcm16" and deltas[0]["sample_rate_hz"] == 24000
    assert len(base64.b64decode(deltas[0]["delta"])) == 9600
    done = h.of("response.done")[0]
    assert done["response"]["status_details"] == {"type": "completed", "reason": "stop"}
    assert done["response_id"] == rid and rid.startswith(f"resp-{h.session.id}-0-")
    text = h.of("response.output_audio_transcript.done")[0]["transcript"]
    assert text == "This is the duplexctl reference server answering turn 0 (epoch 0)."
    assert h.of("rate_limits.updated")[0]["rate_limits"] == []


async def test_playback_ack_ledger_and_history_commit() -> None:
    h = await opened(realtime_factor=0.0)
    rid = await answered_turn(h)
    await h.send(
        {"type": "playback.ack", "response_id": rid, "item_id": f"item_{rid}", "played_ms": 800}
    )
    ack = h.events[-1]["event"]
    assert ack["playback"]["committed_ms"] == 800 and ack["history_committed"] is False
    assert ack["truncate"] is False
    await h.send({"type": "playback.ack", "response_id": rid, "played_ms": 500})
    assert h.events[-1]["event"]["played_ms"] == 800  # monotonic
    await h.send({"type": "playback.ack", "response_id": rid, "played_ms": 2000})
    assert h.events[-1]["event"]["history_committed"] is True
    await h.send({"type": "playback.ack", "response_id": rid, "played_ms": 2000})
    assert h.codes()[-1] == "playback_item_not_found"
    exc = await h.send({"type": "playback.ack", "response_id": rid})
    assert exc is not None and exc.message == "playback.ack requires numeric played_ms"
    await h.send({"type": "playback.ack", "response_id": rid, "item_id": "item_x", "played_ms": 1})
    assert h.codes()[-1] == "playback_item_mismatch"


async def test_response_cancel_cuts_item_and_fences_epoch() -> None:
    h = await opened(realtime_factor=1.0)
    await speak(h)
    await h.send({"type": "input_audio_buffer.commit", "response_create": True})
    await h.wait_for("response.output_audio.delta", 2)
    rid = h.of("response.created")[0]["response_id"]
    await h.send({"type": "playback.ack", "response_id": rid, "played_ms": 200})
    await h.send({"type": "response.cancel", "response_id": rid})
    tail = h.types()[-7:]
    assert tail == FANOUT_DONE
    done = h.of("response.done")[0]["response"]
    assert done["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
    assert done["metadata"]["cancelled_epoch"] == 0 and done["metadata"]["epoch"] == 1
    full = h.of("response.output_audio_transcript.done")[0]["transcript"]
    assert h.of("response.content_part.done")[0]["part"]["transcript"] == full
    generated = done["output"][0]["content"][0]["audio_duration_ms"]
    assert done["output"][0]["content"][0]["transcript"] == cut_transcript(full, 200, generated)
    count = len(h.events)
    await asyncio.sleep(0.6)
    assert len(h.events) == count  # nothing of epoch 0 after its response.done
    await h.send({"type": "response.cancel", "event_id": "again"})
    assert h.of("error")[-1]["error"]["message"] == f"Response is already complete: {rid}"
    await h.send({"type": "response.cancel", "response_id": "resp-unknown"})
    assert len(h.events) == count + 1  # unknown name while idle: no reply


async def test_truncate_after_cancel_is_a_truncating_ack() -> None:
    """As on vLLM-Omni 0.30.0 (peer, recordings/cancel.toml): after response.cancel the
    client truncates to what it heard and gets conversation.item.truncated plus a truncating
    playback.acknowledged — no error — while the cancelled reply no longer owns the turn
    (later silence gets listen beats, not overlap decisions)."""
    h = await opened(realtime_factor=1.0)
    await speak(h)
    await h.send({"type": "input_audio_buffer.commit", "response_create": True})
    await h.wait_for("response.output_audio.delta", 2)
    rid = h.of("response.created")[0]["response_id"]
    await h.send({"type": "playback.ack", "response_id": rid, "played_ms": 100})
    await h.send({"type": "response.cancel", "response_id": rid})
    count = len(h.events)
    await h.send(
        {"type": "conversation.item.truncate", "item_id": f"item_{rid}", "audio_end_ms": 300}
    )
    after = h.events[count:]
    assert [e["type"] for e in after] == ["conversation.item.truncated", "playback.acknowledged"]
    ack = after[1]["event"]
    assert ack["truncate"] is True and ack["played_ms"] == 300 and ack["committed_ms"] == 300
    await h.send({"type": "input_audio_buffer.append", "audio": pcm16(100)})
    assert h.events[-1]["type"] == "response.listen"
    # the record is gone once truncated: a second truncate finds nothing
    await h.send(
        {"type": "conversation.item.truncate", "item_id": f"item_{rid}", "audio_end_ms": 200}
    )
    assert h.codes()[-1] == "playback_item_not_found"


async def test_response_cancel_nothing_started() -> None:
    h = await opened()
    await h.send({"type": "response.cancel"})
    assert h.of("error")[0]["error"]["message"] == "response.cancel requires an active response"


async def test_output_audio_buffer_clear_three_cases() -> None:
    h = await opened(realtime_factor=1.0)
    await h.send({"type": "output_audio_buffer.clear"})
    assert h.events[-1] == {
        **h.events[-1],
        "type": "output_audio_buffer.cleared",
        "response_id": None,
    }
    assert h.session.epoch == 0
    await speak(h)
    await h.send({"type": "input_audio_buffer.commit", "response_create": True})
    await h.wait_for("response.output_audio.delta")
    await h.send({"type": "output_audio_buffer.clear"})
    assert h.types()[-8:] == ["output_audio_buffer.cleared", *FANOUT_DONE]
    assert (
        h.of("response.done")[0]["response"]["status_details"]["reason"]
        == "output_audio_buffer_clear"
    )
    assert h.session.epoch == 1
    h2 = await opened(realtime_factor=0.0)
    rid = await answered_turn(h2)
    await h2.send({"type": "output_audio_buffer.clear"})
    assert (
        h2.events[-1]["type"] == "output_audio_buffer.cleared"
        and h2.events[-1]["response_id"] == rid
    )
    assert h2.session.epoch == 1


async def test_input_cancel_and_barge_in_always_advance_epoch() -> None:
    h = await opened()
    await h.send({"type": "input.cancel"})
    await h.send({"type": "barge_in"})
    assert h.types()[-2:] == ["input_audio_buffer.cleared", "input_audio_buffer.cleared"]
    await h.send({"type": "turn.signal", "event": "user_started"})
    assert h.events[-1]["turn_state"] == "user_speaking" and h.events[-1]["epoch"] == 2
    h2 = await opened(realtime_factor=1.0)
    await speak(h2)
    await h2.send({"type": "input_audio_buffer.commit", "response_create": True})
    await h2.wait_for("response.output_audio.delta")
    await h2.send({"type": "turn.signal", "event": "barge_in"})
    assert h2.types()[-7:] == FANOUT_DONE
    assert h2.of("response.done")[0]["response"]["status_details"]["reason"] == "barge_in"
    assert not h2.of("input_audio_buffer.cleared")


async def test_deferred_commit_is_answered_after_the_response() -> None:
    h = await opened(realtime_factor=1.0)
    await speak(h)
    await h.send({"type": "input_audio_buffer.commit", "response_create": True})
    await h.wait_for("response.output_audio.delta")
    await speak(h, 3)
    decisions = h.of("overlap.decision")
    assert [(d["action"], d["reason"]) for d in decisions] == [("listen", "policy_listen_only")] * 3
    await h.send({"type": "input_audio_buffer.commit", "response_create": False})
    record = h.of("input_audio_buffer.committed")[-1]["event"]
    assert record["overlap_deferred"] is True and record["response_create_deferred"] is False
    await h.send({"type": "response.create", "response": {}, "event_id": "r"})
    assert h.of("error")[-1]["error"]["code"] == "response_already_active"
    await h.wait_for("response.done", 2, timeout=15)
    second = h.of("response.created")[1]["response"]["id"]
    assert second.split("-")[-2] == "0"
    assert "turn 1 (epoch 0)" in h.of("response.output_audio_transcript.done")[1]["transcript"]


async def test_cancel_discards_deferred_turn() -> None:
    h = await opened(realtime_factor=1.0)
    await speak(h)
    await h.send({"type": "input_audio_buffer.commit", "response_create": True})
    await h.wait_for("response.output_audio.delta")
    await speak(h, 2)
    await h.send({"type": "input_audio_buffer.commit"})
    await h.send({"type": "response.cancel"})
    await asyncio.sleep(0.8)
    assert len(h.of("response.created")) == 1


async def test_items_retrieve_delete_truncate() -> None:
    h = await opened(realtime_factor=0.0)
    rid = await answered_turn(h)
    user = h.of("input_audio_buffer.committed")[0]["item_id"]
    await h.send(
        {"type": "conversation.item.truncate", "item_id": f"item_{rid}", "audio_end_ms": 700}
    )
    assert h.types()[-2:] == ["conversation.item.truncated", "playback.acknowledged"]
    await h.send({"type": "conversation.item.retrieve", "item_id": f"item_{rid}"})
    part = h.events[-1]["item"]["content"][0]
    full = h.of("response.output_audio_transcript.done")[0]["transcript"]
    assert part["transcript"] == cut_transcript(full, 700, 2000)
    await h.send(
        {"type": "conversation.item.truncate", "item_id": f"item_{rid}", "audio_end_ms": 500}
    )
    assert h.codes()[-1] == "playback_item_not_found"
    await h.send(
        {"type": "conversation.item.truncate", "item_id": f"item_{rid}", "audio_end_ms": 999999}
    )
    assert h.of("error")[-1]["error"]["message"].endswith("exceeds item audio duration")
    await h.send({"type": "conversation.item.delete", "item_id": user})
    assert h.events[-1]["event"]["deleted"] is True
    await h.send({"type": "conversation.item.delete", "item_id": "nope"})
    assert h.codes()[-1] == "item_not_found"
    exc = await h.send({"type": "conversation.item.delete"})
    assert exc is not None and exc.code == "missing_item_id"


async def test_text_item_turn_and_forbidden_options() -> None:
    h = await opened(realtime_factor=0.0)
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    await h.send({"type": "conversation.item.create", "item": item})
    assert h.types()[-3:] == [
        "conversation.item.added",
        "conversation.item.created",
        "conversation.item.done",
    ]
    await h.send({"type": "response.create", "response": {"temperature": 0.1}, "event_id": "o"})
    assert h.codes() == ["unsupported_native_response_options"]
    await h.send({"type": "response.create"})
    await h.wait_for("response.done")
    assert h.of("response.done")[0]["response"]["status"] == "completed"


async def test_heartbeat_close_and_expire() -> None:
    h = await opened()
    await h.send({"type": "session.heartbeat"})
    assert (
        h.events[-1]["type"] == "session.heartbeat_ack"
        and h.events[-1]["session_id"] == h.session.id
    )
    await h.send({"type": "session.close"})
    last = h.events[-1]
    assert (last["type"], last["reason"], last["event"]) == ("session.closed", "client_close", {})
    with pytest.raises(ProtocolError):
        h.session.receive({"type": "session.heartbeat"})
    h2 = await opened()
    await h2.session.expire("idle_ttl_expired")
    assert h2.events[-1] == {
        **h2.events[-1],
        "type": "session.expired",
        "reason": "idle_ttl_expired",
    }


async def test_close_during_response_has_no_cancelled_done() -> None:
    h = await opened(realtime_factor=1.0)
    await speak(h)
    await h.send({"type": "input_audio_buffer.commit", "response_create": True})
    await h.wait_for("response.output_audio.delta")
    await h.session.close("client_close")
    count = len(h.events)
    await asyncio.sleep(0.5)
    assert len(h.events) == count and h.events[-1]["type"] == "session.closed"
    assert not h.of("response.done")


async def test_server_vad_turn_and_barge_in() -> None:
    td = {"type": "server_vad", "silence_duration_ms": 300}
    h = await opened(session={"turn_detection": td}, realtime_factor=1.0)
    for _ in range(3):
        await h.send({"type": "input_audio_buffer.append", "audio": SILENCE})
    await speak(h, 8)
    started = h.of("input_audio_buffer.speech_started")
    assert len(started) == 1 and started[0]["audio_start_ms"] == 0  # onset 300 ms - padding
    for _ in range(4):
        await h.send({"type": "input_audio_buffer.append", "audio": SILENCE})
    assert h.of("input_audio_buffer.speech_stopped")[0]["audio_end_ms"] >= 1000
    assert h.of("response.created")
    await h.wait_for("response.output_audio.delta")
    await speak(h, 2)
    decisions = [(d["action"], d["reason"]) for d in h.of("overlap.decision")]
    assert ("barge_in", "server_vad_speech_started") in decisions
    assert h.of("overlap.decision")[-1]["metadata"]["cancel_reason"] == "turn_detected"
    assert h.of("response.done")[0]["response"]["status_details"]["reason"] == "turn_detected"


# --- faults ---------------------------------------------------------------------------------------


async def test_stuck_gate_fault_and_default() -> None:
    for faulty in (False, True):
        faults = [Fault("stuck-gate")] if faulty else []
        h = await opened(realtime_factor=1.0, faults=faults)
        await speak(h)
        await h.send({"type": "input_audio_buffer.commit", "response_create": True})
        await h.wait_for("response.output_audio.delta")
        await h.send({"type": "barge_in"})
        await speak(h)
        await h.send({"type": "input_audio_buffer.commit", "response_create": True})
        await asyncio.sleep(0.5)
        assert len(h.of("response.created")) == (1 if faulty else 2)


async def test_fail_append_every_turn_lane_recovers() -> None:
    h = await opened(realtime_factor=0.0, faults=[Fault("fail-append-every", 3)])
    await speak(h, 6)
    assert h.codes() == ["runtime_append_failed"] * 2
    assert h.of("error")[0]["error"]["type"] == "server_error"
    await h.send({"type": "input_audio_buffer.commit", "response_create": True})
    await h.wait_for("response.done")


def test_engine_session_requires_valid_open() -> None:
    from duplexctl.server.model import SimulatedGpu

    with pytest.raises(ProtocolError):
        EngineSession(
            session_id="duplex-x",
            session_obj={"input_audio_format": "mp3"},
            config=turn_config(),
            gpu=SimulatedGpu(turn_config()),
            emit=lambda e: None,
        )


async def test_a_reply_cut_after_it_ended_stays_addressable() -> None:
    """A server-VAD barge-in over a reply that has ended but is not fully acknowledged cuts
    it (nothing runs to cancel) and tells the client only ``overlap.decision``: the client
    may still be acknowledging what it plays, then owes the truncate at the heard position
    (docs/protocol.md §3.5, §6.3). Both are answered, as after a cancel — the record used to
    be released at the cut, so every such ack got ``playback_item_not_found``."""
    td = {"type": "server_vad", "silence_duration_ms": 300}
    h = await opened(session={"turn_detection": td}, realtime_factor=0.0)
    for _ in range(3):
        await h.send({"type": "input_audio_buffer.append", "audio": SILENCE})
    await speak(h, 8)
    for _ in range(4):
        await h.send({"type": "input_audio_buffer.append", "audio": SILENCE})
    await h.wait_for("response.done")
    rid = h.of("response.created")[-1]["response_id"]
    assert h.of("response.done")[-1]["response"]["status"] == "completed"
    await h.send({"type": "playback.ack", "response_id": rid, "played_ms": 0})
    await speak(h, 2)  # the user speaks over the reply still playing at the client
    assert h.of("overlap.decision")[-1]["action"] == "barge_in"
    assert len(h.of("response.done")) == 1  # nothing ran: no cancelled fan-out
    count = len(h.events)
    await h.send(
        {"type": "playback.ack", "response_id": rid, "item_id": f"item_{rid}", "played_ms": 200}
    )
    await h.send(
        {"type": "conversation.item.truncate", "item_id": f"item_{rid}", "audio_end_ms": 300}
    )
    after = [e for e in h.events[count:] if e["type"] != "overlap.decision"]
    assert [e["type"] for e in after] == [
        "playback.acknowledged",
        "conversation.item.truncated",
        "playback.acknowledged",
    ], h.codes()
    assert after[2]["event"]["truncate"] is True and after[2]["event"]["committed_ms"] == 300
    # the record is gone once truncated: a second truncate finds nothing
    await h.send(
        {"type": "conversation.item.truncate", "item_id": f"item_{rid}", "audio_end_ms": 200}
    )
    assert h.codes()[-1] == "playback_item_not_found"


async def test_a_reply_cleared_after_it_ended_stays_addressable() -> None:
    """``output_audio_buffer.clear`` of an ended, unacknowledged reply cuts it the same way;
    the truncate the client then owes is answered without an error."""
    h = await opened(realtime_factor=0.0)
    rid = await answered_turn(h)
    await h.send({"type": "output_audio_buffer.clear"})
    assert h.events[-1]["type"] == "output_audio_buffer.cleared"
    count = len(h.events)
    await h.send(
        {"type": "conversation.item.truncate", "item_id": f"item_{rid}", "audio_end_ms": 700}
    )
    assert [e["type"] for e in h.events[count:]] == [
        "conversation.item.truncated",
        "playback.acknowledged",
    ], h.codes()
