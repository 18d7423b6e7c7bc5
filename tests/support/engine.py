"""Drive an EngineSession without sockets: emit into a list, replay golden client frames.

Used by the tests/test_engine_*.py files. The harness stands in for the transport exactly as
docs/architecture.md describes it: translator rejections raised by ``receive`` become
*unsequenced* error events (they would be written straight to the socket), everything the
engine emits is *sequenced* (the journal would stamp it).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from duplexctl.protocol import codec, ids, names
from duplexctl.protocol.errors import ProtocolError
from duplexctl.server.config import ServerConfig
from duplexctl.server.model import SimulatedGpu
from duplexctl.server.session import EngineSession
from support.paths import read_wire

MIB = 1024 * 1024

OPEN_TURN = {
    "model": "fake/Qwen3-Omni-duplex-peer",
    "modalities": ["audio", "text"],
    "input_audio_format": "pcm16",
    "sample_rate_hz": 16000,
    "output_audio_format": "pcm16",
    "instructions": "You are a helpful voice assistant.",
    "extra_body": {"auto_response": False},
    "turn_detection": None,
}


def turn_config(**overrides: Any) -> ServerConfig:
    """The golden recordings' server: Qwen3-Omni-like, 200 ms chunks, 300 ms TTFA."""
    values: dict[str, Any] = {
        "model_profile": "turn",
        "chunk_ms": 200,
        "ttfa_ms": 300.0,
        "realtime_factor": 1.0,
        "seed": 1,
    }
    values.update(overrides)
    return ServerConfig(**values)


@dataclass
class Harness:
    config: ServerConfig
    session_obj: dict[str, Any] | None
    events: list[dict[str, Any]] = field(default_factory=list)
    unsequenced: list[dict[str, Any]] = field(default_factory=list)
    session: EngineSession = field(init=False)
    gpu: SimulatedGpu = field(init=False)  # what /metrics reads (running requests, queue)

    def __post_init__(self) -> None:
        self.gpu = SimulatedGpu(self.config)
        self.session = EngineSession(
            session_id=ids.session_id(),
            session_obj=self.session_obj,
            config=self.config,
            gpu=self.gpu,
            emit=self._emit,
        )

    def _emit(self, event: dict[str, Any]) -> None:
        """Encode like the journal does (an event the wire cannot carry fails here, inside
        the engine, exactly where it would fail behind a real transport), then keep it."""
        codec.dumps_bytes(event)
        self.events.append(event)

    def start(self) -> None:
        self.session.start()

    async def send(self, event: dict[str, Any]) -> ProtocolError | None:
        """Hand one event to the engine and let the mailbox apply it."""
        try:
            self.session.receive(event)
        except ProtocolError as exc:
            cid = event.get("event_id") if isinstance(event.get("event_id"), str) else None
            self.unsequenced.append(exc.to_event(cid))
            return exc
        await self.session.drain()
        return None

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def of(self, etype: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == etype]

    def codes(self) -> list[str]:
        return [e["error"]["code"] for e in self.events if e["type"] == "error"]

    async def wait_for(self, etype: str, count: int = 1, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while sum(1 for e in self.events if e["type"] == etype) < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out waiting for {count}x {etype}: {self.types()[-20:]}"
                )
            await asyncio.sleep(0.005)


def pcm16(samples_ms: int, *, level: float = 0.0, rate: int = 16000, hz: float = 300.0) -> str:
    """Base64 PCM16 of ``samples_ms`` of silence (level 0) or a sine at ``level``."""
    import numpy as np

    n = rate * samples_ms // 1000
    t = np.arange(n) / rate
    data = (level * np.sin(2 * np.pi * hz * t) * 32767).astype("<i2").tobytes()
    return base64.b64encode(data).decode()


# --- golden transcript replay ------------------------------------------------------------


_SILENCE = base64.b64encode(bytes(3200)).decode()


class AudioRebuilder:
    """Restore appends whose audio the recorder cut to 128 characters (wire README)."""

    def __init__(self) -> None:
        commit = [
            line["frame"]["audio"]
            for line in read_wire("commit_turn")
            if line["dir"] == "out" and line["frame"].get("type") == "input_audio_buffer.append"
        ]
        self.pass_slices = commit[:63]
        self.last = -1

    def rebuild(self, prefix: str) -> str:
        candidates = [i for i, s in enumerate(self.pass_slices) if s.startswith(prefix)]
        if self.last + 1 in candidates:
            self.last += 1
        elif candidates and not prefix.strip("A"):
            if self.last + 1 >= len(self.pass_slices) or self.last < 0:
                return _SILENCE
            self.last += 1
            return self.pass_slices[self.last]
        elif candidates:
            self.last = candidates[0]
        else:
            return _SILENCE
        return self.pass_slices[self.last]


class FrameAudioRebuilder(AudioRebuilder):
    """:class:`AudioRebuilder` for the Nemotron recordings: their appends are 80 ms slices
    of the same WAV (``nemotron_plain`` keeps them whole), or 40 ms halves of them."""

    def __init__(self, slice_ms: int) -> None:
        whole = [
            base64.b64decode(line["frame"]["audio"])
            for line in read_wire("nemotron_plain")
            if line["dir"] == "out" and line["frame"].get("type") == "input_audio_buffer.append"
        ]
        size = 32 * slice_ms  # bytes of PCM16 at 16 kHz
        pieces = [chunk[i : i + size] for chunk in whole for i in range(0, len(chunk), size)]
        speech = [p for p in pieces if p.strip(b"\0")]
        self.pass_slices = [base64.b64encode(p).decode() for p in speech]
        self.silence = base64.b64encode(bytes(size)).decode()
        self.last = -1

    def rebuild(self, prefix: str) -> str:
        if not prefix.strip("A"):
            return self.silence
        return super().rebuild(prefix)


ANCHORS = ("response.created", "response.output_audio.delta", "response.done")
TRANSPORT_SKIP = {
    "session.event_ack": "invalid_event_ack",
    "session.resume": "unsupported_session_resume",
}


@dataclass
class Replay:
    """Recorded vs. reproduced server events of one scenario."""

    recorded_seq: list[dict[str, Any]]
    recorded_unseq_codes: list[str]
    ours: Harness


async def replay(
    name: str,
    config: ServerConfig,
    *,
    big_appends: list[int] | None = None,
    anchors: tuple[str, ...] = ANCHORS,
    silence_before_close_ms: int = 0,
    stream_while_waiting: bool = False,
) -> Replay:
    """Feed a scenario's client frames (connection 1) to a fresh engine.

    Each frame is sent once the engine has emitted at least as many of each ``anchors``
    event (response.created / audio deltas / response.done) as the real server had before
    the client sent it, so client reactions (acks, cancels, overlapping speech) meet the same
    response state. Response and item ids in client frames are mapped to ours by order of
    appearance. ``silence_before_close_ms`` of silent 40 ms appends go before the client's
    ``session.close`` (a frame-locked model advances only on frames: what the real one did
    a frame or two sooner, ours then finishes too). With ``stream_while_waiting`` the
    client keeps streaming silence while it waits for an anchor, as the frame-locked lane
    wants: its model advances only on frames.
    """
    lines = [line for line in read_wire(name) if line["conn"] == 1]
    opening = lines[0]["frame"]
    harness = Harness(config, opening.get("session"))
    harness.start()
    rebuild = (
        FrameAudioRebuilder(40 if name.endswith("_40ms") else 80)
        if name.startswith("nemotron_")
        else AudioRebuilder()
    )
    recorded_seq: list[dict[str, Any]] = []
    recorded_unseq: list[str] = []
    skipped_codes: list[str] = []
    seen: Counter[str] = Counter()
    rec_ids: dict[str, list[str]] = {}
    big = list(big_appends or [])
    for line in lines[1:]:
        frame = line["frame"]
        if line["dir"] == "in":
            if not isinstance(frame, dict):
                continue
            etype = frame.get("type")
            if etype in anchors:
                seen[etype] += 1
            if "answer" in anchors and etype == names.TRANSCRIPT_DELTA and frame.get("delta"):
                seen["answer"] = 1  # the model has begun to speak (one text delta of ours)
            _collect_ids(frame, rec_ids)
            if "server_event_seq" in frame:
                recorded_seq.append(frame)
            elif etype == "error":
                recorded_unseq.append(frame["error"]["code"])
            continue
        # a client frame
        if isinstance(frame, str):
            skipped_codes.append("invalid_json")
            continue
        if not isinstance(frame, dict):
            skipped_codes.append("bad_event")
            continue
        if frame.get("type") in TRANSPORT_SKIP:
            skipped_codes.append(TRANSPORT_SKIP[frame["type"]])
            continue
        frame = json.loads(json.dumps(frame))
        if frame.get("type") == "input_audio_buffer.append" and line.get("truncated"):
            if (
                big
                and not frame["audio"].strip("A")
                and line["t_ms"] > 1000
                and name == "bad_input"
            ):
                size = big.pop(0)
                if size * 4 // 3 >= 15 * MIB - 4096:
                    skipped_codes.append("event_too_large")
                    continue
                frame["audio"] = base64.b64encode(bytes(size)).decode()
            else:
                frame["audio"] = rebuild.rebuild(frame["audio"])
        for anchor in anchors:
            if seen[anchor] and stream_while_waiting:
                silence = {"type": "input_audio_buffer.append", "audio": pcm16(40)}
                for _ in range(500):
                    if _count(harness, anchor) >= seen[anchor]:
                        break
                    await harness.send(dict(silence))
            if seen[anchor] and anchor != "answer":
                await harness.wait_for(anchor, seen[anchor])
        if frame.get("type") == "session.close":
            silence = {"type": "input_audio_buffer.append", "audio": pcm16(40)}
            for _ in range(silence_before_close_ms // 40):
                await harness.send(dict(silence))
        _map_ids(frame, rec_ids, harness)
        await harness.send(frame)
    await harness.session.drain()
    for code in skipped_codes:
        if code in recorded_unseq:
            recorded_unseq.remove(code)
    await harness.session.abort()
    return Replay(recorded_seq, recorded_unseq, harness)


def _count(harness: Harness, anchor: str) -> int:
    if anchor == "answer":
        return sum(1 for e in harness.of(names.TRANSCRIPT_DELTA) if e.get("delta"))
    return len(harness.of(anchor))


def _collect_ids(frame: dict[str, Any], out: dict[str, list[str]]) -> None:
    """Ids by kind, in order of appearance: responses, items, tool calls."""

    def add(kind: str, value: Any) -> None:
        if isinstance(value, str) and value not in out.setdefault(kind, []):
            out[kind].append(value)

    add("response", frame.get("response_id"))
    add("item", frame.get("item_id"))
    add("call", frame.get("call_id"))
    item = frame.get("item")
    if isinstance(item, dict):
        add("item", item.get("id"))
        add("call", item.get("call_id"))


def _map_ids(frame: dict[str, Any], rec_ids: dict[str, list[str]], harness: Harness) -> None:
    """Recorded ids in a client frame → ours, by kind and order; an assistant item follows
    its response (``item_<response_id>``)."""
    ours: dict[str, list[str]] = {}
    for event in harness.events:
        _collect_ids(event, ours)

    def mapped(kind: str, value: Any) -> Any:
        recorded = rec_ids.get(kind, [])
        if isinstance(value, str) and value in recorded:
            index = recorded.index(value)
            if index < len(ours.get(kind, [])):
                return ours[kind][index]
        return value

    rid = frame.get("response_id")
    if isinstance(rid, str):
        frame["response_id"] = mapped("response", rid)
    item_id = frame.get("item_id")
    if isinstance(item_id, str) and item_id.startswith("item_resp"):
        frame["item_id"] = "item_" + str(mapped("response", item_id[len("item_") :]))
    elif isinstance(item_id, str):
        frame["item_id"] = mapped("item", item_id)
    item = frame.get("item")
    if isinstance(item, dict) and isinstance(item.get("call_id"), str):
        item["call_id"] = mapped("call", item["call_id"])


# --- normalisation -------------------------------------------------------------------------


def tokens(events: list[dict[str, Any]]) -> tuple[list[str], Counter[str]]:
    """Event types with the detail that matters, normalised for timing (see test module)."""
    out: list[str] = []
    counts: Counter[str] = Counter()
    previous_audio = False
    for event in events:
        etype = event["type"]
        if etype == "response.output_audio.delta":
            counts["UNIT"] += 1
            previous_audio = True
            continue
        if etype == "response.output_audio_transcript.delta":
            if previous_audio and event.get("delta") == "":
                previous_audio = False
                continue
            token = "TEXT"
        elif etype == "playback.acknowledged":
            counts["ACK"] += 1
            continue
        elif etype == "response.listen":
            token = f"listen:{event['response']['metadata'].get('reason')}"
        elif etype == "overlap.decision":
            token = f"overlap:{event['action']}:{event['reason']}"
        elif etype == "error":
            token = f"error:{event['error']['code']}"
        elif etype == "response.done":
            details = event["response"].get("status_details") or {}
            token = f"response.done:{event['response']['status']}:{details.get('reason')}"
        else:
            token = etype
        previous_audio = False
        if out and out[-1] == token and token.startswith(("listen:", "overlap:")):
            continue
        out.append(token)
    return out, counts


def frame_tokens(events: list[dict[str, Any]]) -> list[str]:
    """:func:`tokens` for the frame-locked lane, where more follows the frames' timing:

    * the text channel's runs are one token (a delta per word or subword: the count follows
      the tokenizer, not the protocol);
    * ``response.listen`` and ``input_audio_buffer.speech_started`` are left out of the
      order (which frames come before the first packet, or between a ``response.done`` and
      the next packet, follows the pipeline delay, ``ttfa_ms``; the tests compare their
      counts instead);
    * ``playback_item_*`` errors are left out: the recorded acks name positions of replies
      as long as the real model made them, ours are not.
    """
    out: list[str] = []
    for token in tokens(events)[0]:
        if token.startswith(("listen:", "error:playback_item_")):
            continue
        if token == "input_audio_buffer.speech_started":
            continue
        if token == "TEXT" and out and out[-1] == "TEXT":
            continue
        out.append(token)
    return out


def frame_config(**overrides: Any) -> ServerConfig:
    """The Nemotron recordings' server: the frame profile, the tool the peer called."""
    values: dict[str, Any] = {
        "model_profile": "frame",
        "ttfa_ms": 0.0,
        "tool_call": "get_weather",
        "seed": 1,
    }
    values.update(overrides)
    return ServerConfig(**values)
