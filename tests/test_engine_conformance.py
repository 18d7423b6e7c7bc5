"""The engine against the golden transcripts of the real vLLM-Omni 0.30.0 server.

Each scenario's client frames (connection 1) are replayed into a fresh EngineSession
configured like the recorded server (Qwen3-Omni-like "turn" profile, 200 ms chunks, 300 ms
TTFA); the engine's emitted event sequence must match the recorded *sequenced* server
events, and the translator rejections must match the recorded unsequenced errors.

Normalisations (support.engine.tokens), each because timing, not behaviour, differs:

* audio units (an audio delta and its empty transcript delta) are counted, not placed: where
  a delta falls between client-driven events depends on the wall clock;
* ``playback.acknowledged`` replies are counted, not placed (they interleave with deltas);
* runs of identical ``response.listen`` beats and identical ``overlap.decision`` events are
  collapsed to one: their number follows the number of appends that fell into the run;
* frames the transport answers itself (invalid JSON, non-object, ``session.event_ack``,
  ``session.resume``, the 15 MiB frame) are not sent, and their recorded errors are removed.
"""

from __future__ import annotations

import difflib

import pytest
from support.engine import MIB, frame_config, frame_tokens, replay, tokens, turn_config

# realtime_factor 0 where the client only reacts after the answer; 1 where the client
# interrupts or overlaps an answer that must still be running
SCENARIOS = {
    "commit_turn": 0.0,
    "cancel": 1.0,
    "clear_input": 0.0,
    "item_truncate": 0.0,
    "session_update": 0.0,
    "text_item_turn": 0.0,
    "turn_overlap_commit": 1.0,
    "server_vad_turn": 1.0,
    "server_vad_barge_in": 1.0,
    "bad_input": 0.0,
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_golden_sequence(name: str) -> None:
    big = [int(4.5 * MIB), int(11.25 * MIB), int(8.5 * MIB)]
    result = await replay(name, turn_config(realtime_factor=SCENARIOS[name]), big_appends=big)
    recorded, recorded_counts = tokens(result.recorded_seq)
    ours, our_counts = tokens(result.ours.events)
    diff = "\n".join(difflib.unified_diff(recorded, ours, "recorded", "engine", lineterm=""))
    assert ours == recorded, diff
    assert our_counts == recorded_counts
    ours_unseq = [e["error"]["code"] for e in result.ours.unsequenced]
    assert ours_unseq == result.recorded_unseq_codes


async def test_golden_field_sets_commit_turn() -> None:
    """Same field names on every event type as the real server (values aside)."""
    result = await replay("commit_turn", turn_config(realtime_factor=0.0))
    recorded: dict[str, set[str]] = {}
    for event in result.recorded_seq:
        recorded.setdefault(event["type"], set()).update(event)
    assert len(recorded) >= 10 and result.ours.events  # a whole turn: created … done
    assert {e["type"] for e in result.ours.events} == set(recorded)
    for event in result.ours.events:
        fields = set(event) | {"server_event_seq"}
        if event["type"] == "response.output_audio_transcript.delta":
            continue  # stand-alone (with metadata) and paired (without) share the type
        assert fields == recorded[event["type"]], event["type"]


@pytest.mark.parametrize("name", ["server_vad_turn", "server_vad_barge_in"])
async def test_server_vad_positions_match_recording(name: str) -> None:
    """speech_started / speech_stopped positions on the input clock, as the real server
    reports them: start = onset − prefix padding, stop = where the detector decided (speech
    end + silence duration), within the energy detector's resolution of Silero's."""
    result = await replay(name, turn_config(realtime_factor=1.0))
    for etype, field in (
        ("input_audio_buffer.speech_started", "audio_start_ms"),
        ("input_audio_buffer.speech_stopped", "audio_end_ms"),
    ):
        recorded = [e[field] for e in result.recorded_seq if e["type"] == etype]
        ours = [e[field] for e in result.ours.events if e["type"] == etype]
        assert recorded, f"{name}: the recording has no {etype}"
        assert len(ours) == len(recorded), etype
        for mine, theirs in zip(ours, recorded, strict=True):
            assert abs(mine - theirs) <= 150, (etype, ours, recorded)


# The Nemotron VoiceChat recordings against the frame profile (docs/protocol.md §13): the
# same responses, tool-call fan-out, item events, answers and terminal statuses, in order
# (support.engine.frame_tokens says what is left to timing). The client streams silence
# while it waits for the call it answers (the frame-locked model advances only on frames).
NEMOTRON = [
    "nemotron_plain",
    "nemotron_tool",
    "nemotron_tool_40ms",
    "nemotron_bargein",
    "nemotron_cancel",
]


@pytest.mark.parametrize("name", NEMOTRON)
async def test_frame_profile_against_nemotron(name: str) -> None:
    result = await replay(
        name,
        frame_config(),
        anchors=("response.function_call_arguments.done", "answer"),
        silence_before_close_ms=4000,
        stream_while_waiting=True,
    )
    recorded, ours = frame_tokens(result.recorded_seq), frame_tokens(result.ours.events)
    diff = "\n".join(difflib.unified_diff(recorded, ours, "recorded", "engine", lineterm=""))
    assert ours == recorded, diff
    started = "input_audio_buffer.speech_started"
    assert result.ours.of(started) and len(result.ours.of(started)) == sum(
        e["type"] == started for e in result.recorded_seq
    )
    assert [e["error"]["code"] for e in result.ours.unsequenced] == result.recorded_unseq_codes
