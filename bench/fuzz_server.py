"""Thousands of malformed inputs against a real ``duplexctl serve`` while a well-behaved session
keeps talking (issue 16, item 4; docs/protocol.md §1.3, §3, §4.5).

The server runs in its own process on 127.0.0.1 (bench/serve_process.py). One well-behaved
session streams real speech (recordings/hello.wav, 100 ms appends paced in real time, then
silence) under server VAD, waits for each answer and acknowledges its playback. Meanwhile
``--workers`` hostile clients open connection after connection and send malformed inputs of
every kind below until ``--inputs`` have gone out; each connection then sends a heartbeat and
must get its ack (or be closed by the server) within ``--answer-timeout`` seconds, else it
counts as hung. Kinds:

  field_type      a documented field of any event with a value of the wrong type
  field_range     numbers at the edges (0, negatives, 2**63, 2**64, 1e300, ...) in any field
  session_numbers session.update with such numbers in rates, VAD, overlap, timeout fields
                  (then an append, which is what once pinned the loop)
  size            megabyte strings, 100k-entry arrays, 1000 video frames, 2 MB of audio
  unknown_type    event types that do not exist
  bad_base64      audio that is not base64, or of an odd PCM16 length
  bad_json        truncated JSON, NaN/Infinity, lone surrogates, plain text
  binary          binary frames
  deep            JSON nested 33-900 levels
  non_object      arrays, numbers, null; objects without a string type
  lifecycle       commands out of order: commit/cancel/ack/truncate with nothing to act on,
                  session.resume mid-connection, bad session.event_ack, events after close
  opening         a hostile first frame: bad session objects, typeless or binary openings
  resume          session.resume with bad ids, tokens and sequence numbers
  oversize        frames over the 15 MiB event limit and over the 16 MiB websocket limit

Prints: inputs sent (by kind), server crashes, tracebacks in the server's log, hung sessions,
the well-behaved session's turns answered, and every error code seen with its count.
Exit status 1 if the server crashed, logged a traceback, a session hung or a turn went
unanswered.

    .venv/bin/python bench/fuzz_server.py --inputs 10000 --workers 8
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import random
import sys
import tempfile
import time
import wave
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
from websockets.asyncio.client import ClientConnection, connect  # noqa: E402
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402

from bench.serve_process import healthy, serve  # noqa: E402
from duplexctl.protocol.settings import SessionSettings  # noqa: E402

ROOT = HERE.parent
CHUNK_MS = 100
#: the opening session objects, built the way every duplexctl command builds them
_SETTINGS = SessionSettings(
    model="duplexctl/simulated-duplex", instructions="You are a helpful voice assistant."
)
OPEN = _SETTINGS.to_session_object()
GOOD_OPEN = replace(_SETTINGS, turn_detection="server_vad", vad_silence_ms=800).to_session_object()
SERVER_ARGS = [
    "--model-profile", "turn", "--max-sessions", "512", "--chunk-ms", "200",
    "--reply-seconds", "1.0", "--disconnect-grace-s", "2", "--config-timeout-s", "2",
]  # fmt: skip
FAILURE_CODES = {"internal_error", "realtime_input_failed", "engine_error"}

Frame = str | bytes

# --- the catalogue of malformed inputs ----------------------------------------------------


def _pcm16(ms: int, level: float) -> str:
    t = np.arange(16 * ms) / 16000
    return base64.b64encode((level * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2")).decode()


SPEECH = _pcm16(CHUNK_MS, 0.3)
EDGES: list[Any] = [
    0, 0.0, -1, -16000, 1, 0.5, 4000, 7999, 192001, 2**31, 2**53 + 1, 2**63 - 1, 2**63,
    2**64 - 1, 2**64, -(2**63), 1e300, -1e300, 5e-324, 10**30,
]  # fmt: skip
WRONG_TYPES: list[Any] = [None, True, False, "", "x", "16000", [], [1, 2], {}, {"a": 1}, 3.5, -7]
FIELDS: dict[str, list[str]] = {
    "input_audio_buffer.append": [
        "audio", "delta", "format", "sample_rate_hz", "sample_rate", "audio_start_ms",
        "audio_end_ms", "is_speech", "speech_probability", "vad", "overlap_action",
        "force_barge_in", "force_listen", "video_frames", "max_slice_nums", "duration_ms",
    ],
    "input_audio_buffer.commit": ["final", "response_create", "create_response", "is_speech"],
    "input.commit": ["response_create"],
    "input_audio_buffer.clear": ["extra"],
    "input.cancel": ["extra"],
    "input.text.append": ["text"],
    "conversation.item.create": ["item", "previous_item_id"],
    "conversation.item.retrieve": ["item_id"],
    "conversation.item.delete": ["item_id"],
    "conversation.item.truncate": ["item_id", "audio_end_ms", "content_index"],
    "response.create": ["response"],
    "response.cancel": ["response_id"],
    "output_audio_buffer.clear": ["response_id"],
    "barge_in": ["extra"],
    "turn.signal": ["event", "payload"],
    "playback.ack": ["played_ms", "committed_ms", "response_id", "item_id"],
    "session.heartbeat": ["extra"],
    "session.update": ["session"],
    "session.event_ack": ["server_event_seq"],
}  # fmt: skip
SESSION_NUMBER_FIELDS = [
    ("sample_rate_hz",), ("sample_rate",), ("audio", "input", "sample_rate_hz"),
    ("audio", "input", "format", "rate"), ("audio", "output", "sample_rate_hz"),
    ("audio", "output", "format", "rate"), ("turn_detection", "silence_duration_ms"),
    ("turn_detection", "prefix_padding_ms"), ("turn_detection", "threshold"),
    ("turn_detection", "min_speech_duration_ms"), ("overlap_silence_rms",),
    ("overlap_barge_in_ms",), ("idle_timeout_s",), ("temperature",),
]  # fmt: skip


def _dump(event: Any) -> str:
    return json.dumps(event)


def _nest(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out: Any = value
    for key in reversed(path):
        out = {key: out}
    if "turn_detection" in out:
        out["turn_detection"] = {"type": "server_vad", **out["turn_detection"]}
    if "audio" in out and "format" in out["audio"].get("input", {}):
        out["audio"]["input"]["format"].setdefault("type", "audio/pcm")
    if "audio" in out and "format" in out["audio"].get("output", {}):
        out["audio"]["output"]["format"].setdefault("type", "audio/pcm")
    return out  # type: ignore[no-any-return]


def field_type(rng: random.Random) -> list[Frame]:
    etype = rng.choice(list(FIELDS))
    return [_dump({"type": etype, rng.choice(FIELDS[etype]): rng.choice(WRONG_TYPES)})]


def field_range(rng: random.Random) -> list[Frame]:
    etype = rng.choice(list(FIELDS))
    event = {"type": etype, rng.choice(FIELDS[etype]): rng.choice(EDGES)}
    if etype == "input_audio_buffer.append" and "audio" not in event:
        event["audio"] = SPEECH
    return [_dump(event)]


def session_numbers(rng: random.Random) -> list[Frame]:
    patch = _nest(rng.choice(SESSION_NUMBER_FIELDS), rng.choice(EDGES))
    return [
        _dump({"type": "session.update", "session": patch, "event_id": "evt_fuzz"}),
        _dump({"type": "input_audio_buffer.append", "audio": SPEECH, "event_id": "evt_after"}),
    ]


def size(rng: random.Random) -> list[Frame]:
    choice = rng.randrange(5)
    if choice == 0:
        return [_dump({"type": "session.update", "session": {"instructions": "x" * 1_500_000}})]
    if choice == 1:
        return [_dump({"type": "session.update", "session": {"modalities": ["audio"] * 100_000}})]
    if choice == 2:
        frames = ["/9j/" + "A" * 60] * 1000
        return [
            _dump({"type": "input_audio_buffer.append", "audio": SPEECH, "video_frames": frames})
        ]
    if choice == 3:
        return [_dump({"type": "input_audio_buffer.append", "audio": "AAAA" * 500_000})]
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "y" * 2_000_000}],
    }
    return [_dump({"type": "conversation.item.create", "item": item})]


def unknown_type(rng: random.Random) -> list[Frame]:
    name = rng.choice(["response.frobnicate", "push_chunk", "input.audio.append", "", "SESSION.UPDATE",
                       "session.updated", "error", "x" * 300, "input_audio_buffer.append "])  # fmt: skip
    return [_dump({"type": name, "event_id": "evt_unknown"})]


def bad_base64(rng: random.Random) -> list[Frame]:
    audio = rng.choice(["@@not base64@@", "AQID", "A", "====", "QUJD=", "YWJj\n", "\u00e9\u00e9"])
    if rng.random() < 0.5:
        return [_dump({"type": "input_audio_buffer.append", "audio": audio, "event_id": "evt_b64"})]
    part = {"type": "input_audio", "audio": audio}
    item = {"type": "message", "role": "user", "content": [part]}
    return [_dump({"type": "conversation.item.create", "item": item})]


def bad_json(rng: random.Random) -> list[Frame]:
    return [
        rng.choice(
            [
                '{"type": "input_audio_buffer.append", "audio": ',
                '{"type":"playback.ack","played_ms":NaN}',
                '{"type":"playback.ack","played_ms":Infinity}',
                '{"type":"session.heartbeat"}}',
                '{"type":"session.heartbeat",}',
                '{"type":"session.heartbeat","x":"\\ud800"}',
                "hello",
                "",
                "{'type': 'session.heartbeat'}",
                "\x00\x01",
            ]
        )
    ]


def binary(rng: random.Random) -> list[Frame]:
    if rng.random() < 0.5:
        return [json.dumps({"type": "session.heartbeat"}).encode()]
    return [bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 64)))]


def deep(rng: random.Random) -> list[Frame]:
    depth = rng.randrange(33, 900)
    value: Any = 1
    for k in range(depth):
        value = [value] if k % 2 else {"k": value}
    if rng.random() < 0.5:
        return [_dump({"type": "session.update", "session": {"note": value}})]
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "x", "m": value}],
    }
    return [_dump({"type": "conversation.item.create", "item": item})]


def non_object(rng: random.Random) -> list[Frame]:
    return [_dump(rng.choice([[1, 2, 3], 42, "session.heartbeat", None, {"event_id": "x"},
                              {"type": 5}, {"type": None}, {"type": ["session.heartbeat"]}]))]  # fmt: skip


def lifecycle(rng: random.Random) -> list[Frame]:
    options: list[list[dict[str, Any]]] = [
        [{"type": "input_audio_buffer.commit"}],
        [{"type": "response.create"}],
        [{"type": "response.cancel"}],
        [{"type": "response.cancel", "response_id": "resp-none"}],
        [{"type": "playback.ack", "played_ms": 100}],
        [{"type": "playback.ack", "played_ms": 100, "response_id": "resp-x", "item_id": "item_y"}],
        [{"type": "conversation.item.truncate", "item_id": "item_none", "audio_end_ms": 10}],
        [{"type": "conversation.item.delete", "item_id": "item_none"}],
        [{"type": "conversation.item.retrieve"}],
        [{"type": "output_audio_buffer.clear"}],
        [{"type": "barge_in"}, {"type": "input.cancel"}],
        [{"type": "session.resume", "session_id": "duplex-0", "resume_token": "x"}],
        [{"type": "session.event_ack", "server_event_seq": rng.choice([-1, 10**9, "3", None])}],
        [{"type": "turn.signal", "event": rng.choice(["user_started", "nonsense", "barge_in"])}],
        [{"type": "input.text.append", "text": "hi"}],
        [
            {"type": "input_audio_buffer.append", "audio": SPEECH},
            {"type": "input_audio_buffer.commit", "response_create": True},
            {"type": "response.create", "response": {}},
            {"type": "response.cancel"},
            {"type": "response.cancel"},
        ],
        [
            {"type": "input_audio_buffer.append", "audio": SPEECH},
            {"type": "input_audio_buffer.commit", "response_create": True},
            {"type": "input_audio_buffer.append", "audio": SPEECH, "force_barge_in": True},
            {"type": "conversation.item.truncate", "item_id": "item_none", "audio_end_ms": 0},
        ],
    ]
    return [_dump(event) for event in rng.choice(options)]


Generator = Callable[[random.Random], list[Frame]]
COMMAND_KINDS: dict[str, Generator] = {
    "field_type": field_type,
    "field_range": field_range,
    "session_numbers": session_numbers,
    "size": size,
    "unknown_type": unknown_type,
    "bad_base64": bad_base64,
    "bad_json": bad_json,
    "binary": binary,
    "deep": deep,
    "non_object": non_object,
    "lifecycle": lifecycle,
}
# relative frequency of each kind (the costly ones rarer)
WEIGHTS = {"size": 0.3, "deep": 0.5}


def opening(rng: random.Random) -> Frame:
    """A hostile first frame."""
    choice = rng.randrange(7)
    if choice == 0:
        key = rng.choice(["input_audio_format", "turn_detection", "overlap_policy", "modalities"])
        return _dump({"type": "session.update", "session": {**OPEN, key: rng.choice(WRONG_TYPES)}})
    if choice == 1:
        patch = _nest(rng.choice(SESSION_NUMBER_FIELDS), rng.choice(EDGES))
        return _dump({"type": "session.update", "session": {**OPEN, **patch}})
    if choice == 2:
        return _dump(
            {"type": "session.update", "session": {**OPEN, "extra_body": {"auto_response": True}}}
        )
    if choice == 3:
        return rng.choice(["[]", "null", '{"session": {}}', "not json", '{"type": 7}'])
    if choice == 4:
        return json.dumps({"type": "session.update", "session": OPEN}).encode()
    if choice == 5:
        return _dump({"type": "input_audio_buffer.commit", "event_id": "evt_first"})
    return _dump({"type": "response.frobnicate"})


def resume(rng: random.Random, known: list[str]) -> Frame:
    sid = rng.choice([*known[-5:], "duplex-0", "", 5, None]) if known else "duplex-0"
    token = rng.choice(["x", "", None, 7, "A" * 100])
    last = rng.choice([0, -1, 10**12, "1", True, None])
    return _dump({"type": "session.resume", "session_id": sid, "resume_token": token,
                  "last_received_server_event_seq": last})  # fmt: skip


# --- hostile clients -----------------------------------------------------------------------


@dataclass
class Tally:
    inputs: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    connections: int = 0
    hung: int = 0
    hung_examples: list[str] = field(default_factory=list)
    session_ids: list[str] = field(default_factory=list)
    client_library_errors: int = 0

    @property
    def total(self) -> int:
        return sum(self.inputs.values())


def _code(event: dict[str, Any]) -> str | None:
    if event.get("type") != "error":
        return None
    err = event.get("error")
    if isinstance(err, dict):
        return str(err.get("code"))
    return str(event.get("code"))


async def _dial(url: str) -> ClientConnection:
    return await connect(url, max_size=None, compression=None, open_timeout=10, proxy=None)


class HostileConnection:
    """One connection: an opening, a batch of malformed inputs, a probe, an ending."""

    def __init__(self, url: str, tally: Tally, rng: random.Random, answer_timeout: float) -> None:
        self.url = url
        self.tally = tally
        self.rng = rng
        self.answer_timeout = answer_timeout
        self.probe_answered = asyncio.Event()
        self.closed = asyncio.Event()

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for raw in ws:
                event = json.loads(raw)
                code = _code(event)
                if code is not None:
                    self.tally.codes[code] += 1
                etype = event.get("type")
                if etype == "session.created":
                    self.tally.session_ids.append(event["session"]["id"])
                if etype in ("session.heartbeat_ack", "session.closed"):
                    self.probe_answered.set()
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()

    async def _answered_or_closed(self) -> bool:
        """The probe heartbeat was answered, or the server ended the connection, in time."""
        waiters = [
            asyncio.ensure_future(self.probe_answered.wait()),
            asyncio.ensure_future(self.closed.wait()),
        ]
        done, pending = await asyncio.wait(
            waiters, timeout=self.answer_timeout, return_when=asyncio.FIRST_COMPLETED
        )
        for waiter in pending:
            waiter.cancel()
        return bool(done)

    async def run(self, kinds: list[str], weights: list[float], budget: int) -> None:
        rng, tally = self.rng, self.tally
        ws = await _dial(self.url + "&autostart=0")
        tally.connections += 1
        reader = asyncio.create_task(self._read(ws))
        sent_kinds: list[str] = []
        try:
            roll = rng.random()
            if roll < 0.07:
                await ws.send(opening(rng))
                tally.inputs["opening"] += 1
                sent_kinds.append("opening")
            elif roll < 0.12:
                await ws.send(resume(rng, tally.session_ids))
                tally.inputs["resume"] += 1
                sent_kinds.append("resume")
            else:
                await ws.send(_dump({"type": "session.update", "session": OPEN}))
            for _ in range(min(budget, rng.randrange(1, 30))):
                if self.closed.is_set():
                    break
                kind = rng.choices(kinds, weights)[0]
                for frame in COMMAND_KINDS[kind](rng):
                    await ws.send(frame)
                tally.inputs[kind] += 1
                sent_kinds.append(kind)
            if rng.random() < 0.01:  # over the 15 MiB event limit, or the 16 MiB websocket limit
                big = rng.choice([15 * 2**20 + 16, 16 * 2**20 + 16])
                await ws.send(_dump({"type": "input_audio_buffer.append", "audio": "A" * big}))
                tally.inputs["oversize"] += 1
                sent_kinds.append("oversize")
            if not self.closed.is_set():
                await ws.send(_dump({"type": "session.heartbeat", "event_id": "probe"}))
            if not await self._answered_or_closed():
                tally.hung += 1
                if len(tally.hung_examples) < 5:
                    tally.hung_examples.append(",".join(sent_kinds))
            ending = rng.random()
            if self.closed.is_set():
                pass
            elif ending < 0.7:
                reason = rng.choice(["client_close", "", "x" * 200, "\u00e9" * 70, 5])
                await ws.send(_dump({"type": "session.close", "reason": reason}))
                await asyncio.wait_for(self.closed.wait(), self.answer_timeout)
            elif ending < 0.9:
                ws.transport.abort()  # vanish: the session waits out its grace
        except (ConnectionClosed, TimeoutError, OSError):
            pass
        except AttributeError:
            # websockets 15 sending on a connection whose transport already went away (after
            # a 1009 close of an oversize frame) fails inside the library; the connection is
            # over either way, and the server's side of it is what this bench measures
            tally.client_library_errors += 1
        finally:
            with contextlib.suppress(AttributeError):
                await ws.close()
            reader.cancel()


async def hostile_worker(
    url: str, tally: Tally, seed: int, target: int, timeout: float, deadline: float
) -> None:
    rng = random.Random(seed)
    kinds = list(COMMAND_KINDS)
    weights = [WEIGHTS.get(k, 1.0) for k in kinds]
    loop = asyncio.get_running_loop()
    while tally.total < target and loop.time() < deadline:
        try:
            await HostileConnection(url, tally, rng, timeout).run(
                kinds, weights, target - tally.total
            )
        except (OSError, InvalidStatus, TimeoutError) as exc:
            tally.codes[f"connect failed: {type(exc).__name__}"] += 1
            await asyncio.sleep(0.2)


# --- the well-behaved session --------------------------------------------------------------


@dataclass
class Talker:
    turns: int = 0
    answered: int = 0
    unanswered: int = 0  # no response.done within 30 s of the end of the turn
    errors: Counter[str] = field(default_factory=Counter)
    first_audio_ms: list[float] = field(default_factory=list)


def speech_chunks(path: Path) -> list[str]:
    with wave.open(str(path)) as wav:
        assert wav.getframerate() == 16000 and wav.getnchannels() == 1 and wav.getsampwidth() == 2
        data = wav.readframes(wav.getnframes())
    step = 16000 * 2 * CHUNK_MS // 1000
    return [base64.b64encode(data[i : i + step]).decode() for i in range(0, len(data), step)]


async def well_behaved(url: str, talker: Talker, stop: asyncio.Event, min_turns: int) -> None:
    chunks = speech_chunks(ROOT / "recordings" / "hello.wav")
    silence = base64.b64encode(bytes(16000 * 2 * CHUNK_MS // 1000)).decode()
    ws = await _dial(url + "&autostart=0")
    await ws.send(_dump({"type": "session.update", "session": GOOD_OPEN}))
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def read() -> None:
        async for raw in ws:
            event = json.loads(raw)
            code = _code(event)
            if code is not None:
                talker.errors[code] += 1
            await events.put(event)

    reader = asyncio.create_task(read())
    loop = asyncio.get_running_loop()
    try:
        while not stop.is_set() or talker.turns < min_turns:
            talker.turns += 1
            t0 = loop.time()
            spoken = chunks + [silence] * 15
            for k, chunk in enumerate(spoken):  # paced in real time, absolute schedule
                await asyncio.sleep(max(0.0, t0 + k * CHUNK_MS / 1000 - loop.time()))
                await ws.send(_dump({"type": "input_audio_buffer.append", "audio": chunk}))
            speech_end = t0 + len(chunks) * CHUNK_MS / 1000
            done: dict[str, Any] | None = None
            first_audio: float | None = None
            try:
                async with asyncio.timeout(30):
                    while done is None:
                        event = await events.get()
                        etype = event.get("type")
                        if etype == "response.output_audio.delta" and first_audio is None:
                            first_audio = loop.time()
                        if etype == "response.done":
                            done = event
            except TimeoutError:
                talker.unanswered += 1
                if stop.is_set():
                    break
                continue
            if first_audio is not None:
                talker.first_audio_ms.append(1000 * (first_audio - speech_end))
            if done["response"]["status"] == "completed":
                talker.answered += 1
                heard = done["response"]["metadata"]["audio_duration_ms"]
                ack = {
                    "type": "playback.ack",
                    "response_id": done["response_id"],
                    "played_ms": heard,
                }
                await ws.send(_dump(ack))
            while not events.empty():
                events.get_nowait()
    except ConnectionClosed:
        talker.errors["connection lost"] += 1
    finally:
        with contextlib.suppress(ConnectionClosed):
            await ws.send(_dump({"type": "session.close"}))
        await asyncio.sleep(0.5)
        reader.cancel()
        await ws.close()


# --- the run -------------------------------------------------------------------------------


async def run(url: str, port: int, args: argparse.Namespace) -> tuple[Tally, Talker, int, float]:
    tally, talker = Tally(), Talker()
    stop = asyncio.Event()
    health_failures = 0

    async def watch_health() -> None:
        nonlocal health_failures
        while not stop.is_set():
            if not await asyncio.to_thread(healthy, port, 5.0):
                health_failures += 1
            await asyncio.sleep(1.0)

    t0 = time.monotonic()
    deadline = asyncio.get_running_loop().time() + args.max_seconds
    talking = asyncio.create_task(well_behaved(url, talker, stop, args.min_turns))
    watching = asyncio.create_task(watch_health())
    workers = [
        hostile_worker(url, tally, args.seed * 1000 + k, args.inputs, args.answer_timeout, deadline)
        for k in range(args.workers)
    ]
    await asyncio.gather(*workers)
    stop.set()
    await talking
    await watching
    return tally, talker, health_failures, time.monotonic() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=10_000, help="malformed inputs to send")
    parser.add_argument("--workers", type=int, default=8, help="hostile clients at once")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-turns", type=int, default=5, help="turns the good session speaks")
    parser.add_argument("--answer-timeout", type=float, default=15.0, help="s before 'hung'")
    parser.add_argument("--max-seconds", type=float, default=900, help="stop sending after")
    parser.add_argument("--log", type=Path, default=None, help="server log (default: a temp file)")
    args = parser.parse_args()
    log_path = args.log or Path(tempfile.mkdtemp(prefix="fuzz_server_")) / "serve.log"
    with serve(SERVER_ARGS, log_path) as server:
        tally, talker, health_failures, wall = asyncio.run(run(server.url, server.port, args))
        crashed = server.proc.poll() is not None
        server.stop()
    log_text = log_path.read_text(errors="replace")
    tracebacks = log_text.count("Traceback (most recent call last)")
    failures = {code: n for code, n in tally.codes.items() if code in FAILURE_CODES}
    print(f"duplexctl serve {' '.join(SERVER_ARGS)}")
    print(
        f"inputs sent:            {tally.total} over {tally.connections} connections in {wall:.0f} s"
    )
    for kind, n in sorted(tally.inputs.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<22}{n}")
    print(f"server crashes:         {int(crashed)} (SIGTERM exit code {server.exit_code})")
    print(f"tracebacks in its log:  {tracebacks}")
    print(
        f"hung sessions:          {tally.hung}" + (f" {tally.hung_examples}" if tally.hung else "")
    )
    print(f"/health failures:       {health_failures}")
    p50 = float(np.median(talker.first_audio_ms)) if talker.first_audio_ms else float("nan")
    print(
        f"well-behaved session:   {talker.answered}/{talker.turns} turns answered "
        f"({talker.unanswered} unanswered), errors {dict(talker.errors) or 0}, first audio "
        f"p50 {p50:.0f} ms after the file's last chunk"
    )
    print("error codes seen:")
    for code, n in tally.codes.most_common():
        print(f"  {code:<34}{n}")
    if tally.client_library_errors:
        print(f"(client-side websockets errors on dead connections: {tally.client_library_errors})")
    print(f"server log: {log_path}")
    ok = (
        not crashed
        and tracebacks == 0
        and tally.hung == 0
        and not failures
        and talker.answered == talker.turns
        and not talker.errors
        and server.exit_code == 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
