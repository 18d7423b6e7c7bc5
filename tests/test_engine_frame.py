"""The frame-locked profile (``serve --model-profile frame``, docs/protocol.md §13): what
vLLM-Omni 0.30.0's Nemotron VoiceChat lane does, with tool calls at a known truth."""

from __future__ import annotations

import base64
import json

import pytest
from support.engine import Harness, frame_config, pcm16

from duplexctl.protocol.errors import ProtocolError
from duplexctl.server.engine.frame_lane import PACKET_SAMPLES
from duplexctl.server.session import validate_open

SPEECH = pcm16(40, level=0.3)
SILENCE = pcm16(40)
TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
OPEN = {
    "modalities": ["audio", "text"],
    "turn_detection": None,
    "extra_body": {"auto_response": True},
}


async def stream(h: Harness, audio: str, n: int) -> None:
    for _ in range(n):
        await h.send({"type": "input_audio_buffer.append", "audio": audio})


def texts(h: Harness) -> str:
    return "".join(e["delta"] for e in h.of("response.output_audio_transcript.delta"))


def audible(h: Harness) -> list[dict[str, object]]:
    out = []
    for e in h.of("response.output_audio.delta"):
        if any(base64.b64decode(str(e["delta"]))):
            out.append(e)
    return out


async def test_open_needs_auto_response_and_at_most_five_tools() -> None:
    config = frame_config()
    with pytest.raises(ProtocolError) as refused:
        validate_open({"turn_detection": None}, config)
    assert refused.value.code == "unsupported_nemotron_duplex_mode"
    validate_open({"extra_body": {"full_duplex": True}}, config)  # Nemotron's other spelling
    six = [{"type": "function", "name": f"t{i}"} for i in range(6)]
    with pytest.raises(ProtocolError, match="at most 5 tools"):
        validate_open({**OPEN, "tools": six}, config)
    h = Harness(config, {**OPEN, "tools": TOOLS})
    caps = h.session.capabilities
    assert caps["chunk_period_ms"] == 80 and caps["supports_barge_in"] is False
    assert caps["supports_audio_truncate"] is False
    assert caps["implementation_level"] == "model_native_duplex"


async def test_one_packet_per_frame_and_appends_at_most_one_frame() -> None:
    h = Harness(frame_config(), OPEN)
    h.start()
    await h.send({"type": "input_audio_buffer.append", "audio": pcm16(100)})
    f32 = base64.b64encode(bytes(4 * 640)).decode()
    for rate in (24000, 16000):
        await h.send(
            {
                "type": "input_audio_buffer.append",
                "audio": f32,
                "format": "pcm_f32le",
                "sample_rate_hz": rate,
            }
        )
    refusals = [e["error"]["message"] for e in h.of("error")]
    assert refusals == [
        "Frame-locked Realtime append must contain at most 1280 samples",
        "Duplex frame-locked audio sample_rate_hz must be 16000",
    ]
    await stream(h, SILENCE, 23)  # 24 x 40 ms with the f32 one: 12 frames, 12 packets
    deltas = h.of("response.output_audio.delta")
    assert len(deltas) == 12 and len(h.of("response.created")) == 1
    assert {e["sample_rate_hz"] for e in deltas} == {22050}
    assert all(len(base64.b64decode(e["delta"])) == 2 * PACKET_SAMPLES for e in deltas)
    assert [e["metadata"]["audio_duration_ms"] for e in deltas] == [80 * k for k in range(1, 13)]
    assert not audible(h) and len(h.of("response.listen")) == 1  # before the first packet


async def test_the_model_hears_the_user_out_then_answers() -> None:
    h = Harness(frame_config(ttfa_ms=100.0), OPEN)  # each packet 100 ms after its frame
    h.start()
    await stream(h, SPEECH, 20)  # 400 ms of speech
    assert len(h.of("input_audio_buffer.speech_started")) == 1
    await stream(h, SILENCE, 14)  # 560 ms: not yet 640 ms of silence
    assert texts(h) == ""
    await stream(h, SILENCE, 80)
    await h.wait_for("response.done")
    first_text = next(
        i for i, e in enumerate(h.events) if e["type"].endswith("transcript.delta") and e["delta"]
    )
    first_voice = h.events.index(audible(h)[0])
    assert first_text < first_voice  # the text channel runs ahead of the audio
    [done] = h.of("response.done")
    assert done["response"]["status_details"] == {"type": "completed", "reason": "stop"}
    assert texts(h).startswith("This is the duplexctl reference server answering turn 0")
    await stream(h, SILENCE, 2)
    await h.wait_for("response.created", 2)  # the next response opens on the next packet


async def test_the_open_stream_is_a_running_request_for_the_metrics() -> None:
    """Issue 29.5 on the frame profile: its stream is a request running on the model from
    its first packet to its ``response.done`` (a generated reply is counted from its
    submission), so ``vllm:num_requests_running`` and the KV-cache usage of ``serve
    --model-profile frame`` are not 0 while it speaks (they were: the stream bypassed the
    counters); the count falls back when it is done and when the session ends."""
    h = Harness(frame_config(max_sessions=4), OPEN)
    h.start()

    def streams_open() -> int:
        return len(h.of("response.created")) - len(h.of("response.done"))

    assert h.gpu.running == 0
    await stream(h, SPEECH, 20)
    await h.wait_for("response.created")
    assert h.gpu.running == streams_open() == 1 and h.gpu.kv_usage(4) == 0.25
    await stream(h, SILENCE, 94)  # the answer, its response.done, the next stream opened
    await h.wait_for("response.done")
    assert len(h.of("response.created")) == 2
    assert h.gpu.running == streams_open() == 1  # the first one no longer counts
    await h.session.abort()
    assert h.gpu.running == 0


async def test_a_tool_call_its_result_and_the_answer() -> None:
    h = Harness(frame_config(), {**OPEN, "tools": TOOLS})
    h.start()
    await stream(h, SPEECH, 20)
    await stream(h, SILENCE, 16 + 2 * 30)  # the end of the turn, then the call's frames
    [call] = h.of("response.function_call_arguments.done")
    assert call["arguments"] == '{"city":"Paris"}' and call["response_id"].startswith("resp_")
    await h.send({"type": "response.create", "response": {}})  # never: the lane refuses it
    for item in (
        {"call_id": "call_nope", "output": "x"},
        {"call_id": call["call_id"], "output": {"temp": 21}},
        {"call_id": call["call_id"], "output": '{"temp": 21}'},
        {"call_id": call["call_id"], "output": "again"},
    ):
        await h.send(
            {"type": "conversation.item.create", "item": {"type": "function_call_output", **item}}
        )
    assert h.codes() == [
        "response_already_active",
        "invalid_function_call_output",
        "invalid_function_call_output",
        "invalid_function_call_output",
    ]
    assert [e["error"].get("param") for e in h.of("error")][1:] == [
        "item.call_id",
        "item.output",
        "item.output",
    ]
    await stream(h, SILENCE, 100)
    assert 'get_weather returned {"temp":21}' in texts(h)
    assert h.of("response.done")[-1]["response"]["status_details"]["reason"] == "stop"


@pytest.mark.parametrize("taken", [True, False], ids=["taken", "not-yet-taken"])
async def test_a_cancel_forgets_a_result_the_model_took(taken: bool) -> None:
    """§13.3: the model takes a result on its next frame and reads it one token per frame; a
    cancel then forgets it. One sent since the model's last frame lives in the session and
    the new request takes it (what vLLM-Omni 0.30.0 does with its runtime config)."""
    h = Harness(frame_config(), {**OPEN, "tools": TOOLS})
    h.start()
    await stream(h, SPEECH, 20)
    await stream(h, SILENCE, 16 + 2 * 30)
    [call] = h.of("response.function_call_arguments.done")
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "{}"}
    await h.send({"type": "conversation.item.create", "item": output})
    if taken:
        await stream(h, SILENCE, 4)  # two frames: the model has the result
    await h.send({"type": "response.cancel"})
    cancelled = h.of("response.done")[-1]["response"]
    assert cancelled["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
    await stream(h, SILENCE, 100)
    assert ("returned" in texts(h)) is not taken
    assert h.of("response.created")[-1]["response_id"].split("-")[-2] == "1"  # epoch 1


async def test_speech_over_the_answer_ends_it_completed_and_is_answered() -> None:
    h = Harness(frame_config(reply_seconds=4.0), OPEN)
    h.start()
    await stream(h, SPEECH, 20)
    await stream(h, SILENCE, 20)
    assert audible(h)
    await stream(h, SPEECH, 8)  # 320 ms over the answer: the model ends its turn
    first = h.of("response.done")[0]["response"]
    assert first["status_details"] == {"type": "completed", "reason": "stop"}
    cut = first["output"][0]["content"][0]["transcript"]
    assert cut and len(cut) < len("This is the duplexctl reference server answering turn 0")
    assert not h.of("overlap.decision")
    await stream(h, SILENCE, 40)
    assert "answering turn 1" in texts(h)


async def test_instructions_and_tools_are_immutable_and_barge_in_refused() -> None:
    h = Harness(frame_config(), {**OPEN, "instructions": "a", "tools": TOOLS})
    h.start()
    for patch in ({"instructions": "b"}, {"tools": []}, {"instructions": "a"}):
        await h.send({"type": "session.update", "session": patch, "event_id": "evt_u"})
    await h.send({"type": "barge_in"})
    assert h.codes() == [
        "invalid_duplex_runtime_config",
        "invalid_duplex_runtime_config",
        "barge_in_unsupported",
    ]
    assert json.dumps(h.of("session.updated")[-1]["session"]["tools"]) == json.dumps(TOOLS)
