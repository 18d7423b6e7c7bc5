"""Every field a client sends is checked before anything uses it (issue 16, item 1).

Each test pins one defect measured on main, with the answer vLLM-Omni 0.30.0 gives for the
same input where it has one (read from its sources and asked of the real peer), else the
nearest documented code (docs/protocol.md §4.4, §4.5):

* a session-level input rate is taken as declared (echoed in ``session.updated``) and
  range-checked on every append that uses it (``bad_event``, unsequenced, like a per-append
  rate); a rate that is not a positive number is ignored, as 0.30.0 ignores it;
* an output rate outside 8000-192000 Hz is refused when declared (0.30.0 accepts it and then
  never delivers audio);
* client clock hints and playback positions beyond the JSON-safe integer range (2**53) are
  not numbers the server can echo: hints are ignored, acknowledged positions are ``bad_event``;
* frames: binary frames and JSON nested deeper than 32 levels are ``bad_event``.

Nothing here may answer ``internal_error`` or log a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.engine import OPEN_TURN, Harness, pcm16, turn_config
from support.hostile_clients import exit_if_hung
from support.paths import with_parent
from support.server import (
    OPEN_SESSION,
    closed_code,
    dial,
    open_session,
    recv,
    recv_until,
    running,
    send,
    ws_url,
)

from duplexctl.protocol.errors import ProtocolError
from duplexctl.server.session import validate_open

ROOT = Path(__file__).resolve().parent.parent
SPEECH = pcm16(100, level=0.3)
RATE_MESSAGE = "sample_rate_hz must be between 8000 and 192000"


@pytest.fixture
def watchdog(request: pytest.FixtureRequest) -> Iterator[None]:
    with exit_if_hung(request.config, 60):
        yield


@pytest.fixture(autouse=True)
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> Any:
    """A client's input is never an engine failure: nothing logged at ERROR or above."""
    caplog.set_level(logging.WARNING, logger="duplexctl")
    yield
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not failures, [r.getMessage() for r in failures]


async def opened(session: dict[str, Any] | None = None, **config: Any) -> Harness:
    h = Harness(
        turn_config(realtime_factor=0.0, ttfa_ms=0.0, reply_seconds=0.4, **config),
        {**OPEN_TURN, **(session or {})},
    )
    h.start()
    return h


def no_internal_errors(h: Harness) -> None:
    assert "internal_error" not in h.codes(), h.codes()


# --- the session's input rate ------------------------------------------------------------


@pytest.mark.usefixtures("watchdog")
@pytest.mark.parametrize(
    "patch",
    [
        {"sample_rate_hz": 2**63},
        {"sample_rate_hz": 1e300},  # echoed as the float it is: its int form cannot be encoded
        {"sample_rate": 4000},
        {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 2**63}}}},
        {"audio": {"input": {"sample_rate_hz": 192001}}},
    ],
)
async def test_session_rate_out_of_range_refuses_every_append(patch: dict[str, Any]) -> None:
    h = await opened()
    await h.send({"type": "session.update", "session": patch, "event_id": "up"})
    assert h.types()[-1] == "session.updated"  # taken as declared, as 0.30.0 takes it
    for _ in range(2):
        with pytest.raises(ProtocolError) as exc:
            h.session.receive(
                {"type": "input_audio_buffer.append", "audio": SPEECH, "event_id": "a1"}
            )
        assert (exc.value.code, exc.value.message, exc.value.echo_event_id) == (
            "bad_event",
            RATE_MESSAGE,
            True,
        )
    # an append that states a legal rate of its own is still served
    await h.send({"type": "input_audio_buffer.append", "audio": SPEECH, "sample_rate_hz": 16000})
    assert h.types()[-1] == "input_audio_buffer.speech_started"
    no_internal_errors(h)
    await h.session.close("client_close")


@pytest.mark.usefixtures("watchdog")
async def test_open_rate_out_of_range_refuses_every_append() -> None:
    h = await opened({"sample_rate_hz": 2**63})
    assert h.of("session.updated")[0]["session"]["audio"]["input"]["sample_rate_hz"] == 2**63
    with pytest.raises(ProtocolError) as exc:
        h.session.receive({"type": "input_audio_buffer.append", "audio": SPEECH})
    assert (exc.value.code, exc.value.message) == ("bad_event", RATE_MESSAGE)
    await h.session.close("client_close")


@pytest.mark.parametrize("rate", [0, 0.0, -5, -16000, "16000", None, [16000]])
async def test_session_rate_that_is_not_a_positive_number_is_ignored(rate: Any) -> None:
    h = await opened()
    assert await h.send({"type": "session.update", "session": {"sample_rate_hz": rate}}) is None
    assert len(h.of("session.updated")) == 2
    assert h.of("session.updated")[-1]["session"]["audio"]["input"]["sample_rate_hz"] == 16000
    await h.send({"type": "input_audio_buffer.append", "audio": SPEECH})
    assert h.types()[-1] == "input_audio_buffer.speech_started"
    assert h.codes() == []
    opened_with = await opened({"sample_rate_hz": rate})
    await opened_with.send({"type": "input_audio_buffer.append", "audio": SPEECH})
    assert opened_with.types()[-1] == "input_audio_buffer.speech_started"
    assert opened_with.codes() == []


async def test_session_rate_as_a_fraction_is_truncated_like_0_30() -> None:
    h = await opened()
    assert await h.send({"type": "session.update", "session": {"sample_rate_hz": 16000.5}}) is None
    assert len(h.of("session.updated")) == 2
    assert h.of("session.updated")[-1]["session"]["audio"]["input"]["sample_rate_hz"] == 16000
    await h.send({"type": "input_audio_buffer.append", "audio": SPEECH})
    assert h.types()[-1] == "input_audio_buffer.speech_started"


# --- the output rate ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "patch",
    [
        {"audio": {"output": {"format": {"type": "audio/pcm", "rate": 2**63}}}},
        {"audio": {"output": {"sample_rate_hz": 7999}}},
        {"output_audio_format": {"type": "audio/pcm", "rate": 192001}},
    ],
)
async def test_output_rate_out_of_range_is_refused(patch: dict[str, Any]) -> None:
    h = await opened()
    exc = await h.send({"type": "session.update", "session": patch, "event_id": "up"})
    assert exc is not None and exc.code == "unsupported_audio_format", exc
    with pytest.raises(ProtocolError) as at_open:
        validate_open(patch, turn_config())
    assert at_open.value.code == "invalid_session_config"
    # nothing changed: a turn is still answered at 24 kHz
    await h.send({"type": "input_audio_buffer.append", "audio": SPEECH})
    await h.send({"type": "input_audio_buffer.commit", "response_create": True})
    await h.wait_for("response.done")
    assert {e["sample_rate_hz"] for e in h.of("response.output_audio.delta")} == {24000}
    no_internal_errors(h)


# --- numbers the server echoes -------------------------------------------------------------


@pytest.mark.parametrize("value", [float(2**64), 1e300, -1e300])
async def test_clock_hints_beyond_the_json_safe_range_are_ignored(value: float) -> None:
    h = await opened()
    await h.send({"type": "input_audio_buffer.append", "audio": SPEECH, "audio_start_ms": value})
    started = h.of("input_audio_buffer.speech_started")
    assert len(started) == 1 and started[0]["audio_start_ms"] == 0
    assert h.codes() == []


async def test_playback_positions_beyond_the_json_safe_range_are_bad_events() -> None:
    h = await opened()
    for _ in range(3):
        await h.send({"type": "input_audio_buffer.append", "audio": SPEECH})
    await h.send({"type": "input_audio_buffer.commit", "response_create": True})
    await h.wait_for("response.done")
    rid = h.of("response.created")[-1]["response_id"]
    for field in ("played_ms", "committed_ms"):
        exc = await h.send(
            {"type": "playback.ack", "response_id": rid, "played_ms": 10, field: 1e300}
        )
        assert exc is not None and exc.code == "bad_event", exc
    exc = await h.send(
        {"type": "conversation.item.truncate", "item_id": f"item_{rid}", "audio_end_ms": 1e300}
    )
    assert exc is not None and exc.code == "bad_event", exc
    await h.send({"type": "playback.ack", "response_id": rid, "played_ms": 2**53})
    assert h.types()[-1] == "playback.acknowledged"
    no_internal_errors(h)


async def test_client_assistant_item_with_malformed_audio_part_truncates_cleanly() -> None:
    h = await opened()
    item = {
        "id": "item_mine",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_audio", "audio_duration_ms": "long", "transcript": 5}],
    }
    await h.send({"type": "conversation.item.create", "item": item})
    await h.send({"type": "conversation.item.truncate", "item_id": "item_mine", "audio_end_ms": 0})
    await h.send({"type": "conversation.item.truncate", "item_id": "item_mine", "audio_end_ms": 9})
    assert "conversation.item.truncated" in h.types()
    assert h.codes()[-1] == "bad_event"  # 9 ms exceeds an item whose duration is unknown (0)
    no_internal_errors(h)


# --- per-session state a client can grow --------------------------------------------------


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


async def test_appends_at_many_rates_keep_resampler_state_bounded() -> None:
    """Each input rate used to keep its own streaming resampler (~240 kB of soxr state) for the
    life of the session: 400 appends at 400 rates held ~95 MB."""
    h = await opened()
    before = _rss_mb()
    for k in range(400):
        rate = 8000 + 37 * k
        await h.send(
            {
                "type": "input_audio_buffer.append",
                "audio": pcm16(10, rate=rate),
                "sample_rate": rate,
            }
        )
    grown = _rss_mb() - before
    assert grown < 40, f"{grown:.0f} MB held after appends at 400 rates"
    assert h.codes() == []


# --- frames (real websockets, in-process server) --------------------------------------------


async def test_binary_frames_are_bad_events_and_the_socket_stays_open() -> None:
    async with running("real") as server:
        ws, _, _ = await open_session(server)
        await ws.send(json.dumps({"type": "session.heartbeat"}).encode())  # binary frame
        err = await recv(ws)
        assert err["type"] == "error" and err["error"]["code"] == "bad_event", err
        assert "server_event_seq" not in err
        await send(ws, {"type": "session.heartbeat"})
        assert (await recv(ws))["type"] == "session.heartbeat_ack"
        await ws.close()
        first = await dial(ws_url(server))
        await first.send(json.dumps({"type": "session.update", "session": OPEN_SESSION}).encode())
        err = await recv(first)
        assert err["error"]["code"] == "bad_event"
        assert (await closed_code(first))[0] == 1006


def _nested(depth: int) -> Any:
    value: Any = 1
    for k in range(depth):
        value = [value] if k % 2 else {"k": value}
    return value


async def test_deeply_nested_events_are_bad_events() -> None:
    async with running("real") as server:
        ws, _, _ = await open_session(server)
        await ws.send(json.dumps({"type": "session.update", "session": {"note": _nested(300)}}))
        err = await recv(ws)
        assert err["type"] == "error" and err["error"]["code"] == "bad_event", err
        await send(ws, {"type": "session.update", "session": {"note": _nested(20)}})
        assert (await recv(ws))["type"] == "session.updated"
        await ws.close()
        first = await dial(ws_url(server))
        await first.send(json.dumps({"type": "session.update", "session": {"note": _nested(300)}}))
        assert (await recv(first))["error"]["code"] == "bad_event"
        assert (await closed_code(first))[0] == 1006


@pytest.mark.parametrize("reason", ["x" * 200, "é" * 70])
async def test_a_long_close_reason_still_ends_with_a_close_frame(reason: str) -> None:
    """The client's session.close reason is the close frame's reason, which may hold 123
    bytes: a longer one made the writer fail (traceback) and the client got no close frame."""
    async with running("real") as server:
        ws, _, _ = await open_session(server)
        await send(ws, {"type": "session.close", "reason": reason})
        closed = (await recv_until(ws, "session.closed"))[-1]
        assert closed["reason"] == reason
        code, sent_reason = await closed_code(ws)
        assert code == 1000 and reason.startswith(sent_reason)
        assert 100 <= len(sent_reason.encode()) <= 123


# --- the whole server (a real ``duplexctl serve`` process) --------------------------------


@contextlib.asynccontextmanager
async def serve_process(*args: str) -> AsyncIterator[tuple[str, int]]:
    """``duplexctl serve --port 0``; yields (duplex URL, port). Killed if it will not stop."""
    proc = await asyncio.create_subprocess_exec(
        *with_parent([sys.executable, "-m", "duplexctl", "serve", "--port", "0", *args]),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        match = re.search(r"(ws://127\.0\.0\.1:(\d+)/v1/realtime\?duplex=1)", line)
        assert match, line
        yield match.group(1), int(match.group(2))
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0  # SIGTERM still obeyed
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def _health(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
        return int(answer.status)


async def test_one_session_update_cannot_stop_the_server() -> None:
    """Measured on main: sample_rate_hz = 2**63 then one append pinned the event loop; no
    session was answered, /health timed out and SIGTERM was ignored."""
    async with serve_process("--model-profile", "turn") as (url, port):
        hostile = await dial(url + "&autostart=0")
        await send(hostile, {"type": "session.update", "session": OPEN_SESSION})
        await recv_until(hostile, "session.updated")
        await send(hostile, {"type": "session.update", "session": {"sample_rate_hz": 2**63}})
        await recv_until(hostile, "session.updated")
        await send(hostile, {"type": "input_audio_buffer.append", "audio": SPEECH, "event_id": "x"})
        err = await recv(hostile, timeout=10)
        assert err["error"]["code"] == "bad_event" and err["error"]["event_id"] == "x", err
        assert await asyncio.to_thread(_health, port) == 200
        other = await dial(url + "&autostart=0")
        await send(other, {"type": "session.update", "session": OPEN_SESSION})
        await send(other, {"type": "session.heartbeat"})
        await recv_until(other, "session.heartbeat_ack", timeout=10)
        await other.close()
        await hostile.close()
