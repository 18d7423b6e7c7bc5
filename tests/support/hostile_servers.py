"""Hostile servers on 127.0.0.1: what a broken, misconfigured or malicious server does to a
client (issue 16.1, 16.4; issue 17.1, 17.2, 17.5, 17.7).

Each is a few lines of ``websockets`` or plain asyncio, started with :func:`hostile` (an async
context manager yielding a :class:`Hostile` with the URL to point a client at). They live
in one place so that every client test — the connection, ``replay``/``probe``/``load`` as
subprocesses, the hypothesis suite and ``bench/fuzz_client.py`` — meets the same servers.

Kinds (``hostile(kind, ...)``):

* ``hang``             upgrade, then never a frame (no ``session.created``), reads forever
* ``garbage_text``     upgrade, then a text frame that is not JSON
* ``garbage_binary``   upgrade, then a binary frame
* ``garbage_array``    upgrade, then JSON that is not an object (``[1, 2, 3]``)
* ``drop_after_upgrade``  upgrade, then TCP abort (no close frame)
* ``close_after_upgrade`` upgrade, then a close frame (1011)
* ``duplex``           a small scripted duplex server (:class:`Script`): the handshake of
  docs/protocol.md §1.4, a reply per commit, heartbeats, close; ``script.after_handshake``
  frames (malformed events) are sent right after ``session.updated``; ``drop_mid_reply``
  aborts TCP after that many audio deltas; ``refuse_resume`` answers every resume with
  ``invalid_resume_token`` and ends the connection; ``plant`` puts a string (terminal escape
  sequences: :data:`PLANTED`) in every field a client shows — the session id, the model, the
  capabilities, an error's code and message, the answer's transcript — and ``refuse_open``
  answers the opening ``session.update`` with that error instead; and the ways of a server
  that keeps ending connections (issue 31.3): ``drop_every`` aborts TCP after that many
  frames sent on each connection (resumes accepted), ``on_close`` answers ``session.close``
  with ``"drop"`` (TCP abort), ``"ignore"`` (nothing) or ``"closed"`` (the default),
  ``hang_resume`` never answers a resume, ``stop_reading`` stops reading the socket after the
  handshake (the client's writes back up)
* ``plain_http``       an HTTP server answering 200 with a web page (not a websocket)
* ``http_404``         an HTTP server answering 404 to every path
* ``silent_tcp``       accepts TCP, says nothing (upgrade — or TLS handshake — never answered)
* ``not_http``         accepts TCP, sends a line that is not HTTP, closes
* ``nothing``          a port nobody listens on (connection refused)

``tls=True`` serves the same over TLS with a certificate signed by a throwaway CA made with
``trustme`` (``Hostile.ca_file`` is that CA's PEM): verification against the system trust
store fails, ``--ca-file`` or ``--insecure`` makes it work.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from support.paths import SHORT, free_port

SESSION_ID = "duplex-" + "0" * 32
#: the clip a client speaks against these servers (one short turn)
CLIP = Path(SHORT)
RESPONSE_ID = f"resp-{SESSION_ID}-0-0000abcd"
#: 100 ms of 24 kHz PCM16 silence: the audio every scripted delta carries
DELTA_B64 = base64.b64encode(bytes(4800)).decode()

Frame = str | bytes

#: What a hostile server plants in the strings a client shows (issue 31.1): clear the screen,
#: retitle the window (OSC 0), write the clipboard (OSC 52), ring the bell, a C1 CSI, DEL,
#: and rich markup. Its first character makes a spreadsheet cell a formula.
PLANTED = (
    "=cmd|'/C calc'!A0 \x1b[2J\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\x07\x9b31m\x7f"
    "[bold red on white]markup[/] [link=https://example.invalid]link[/link]"
)


@dataclass
class Script:
    """What the ``duplex`` kind does (a well-behaved server unless told otherwise)."""

    after_handshake: list[Frame] = field(default_factory=list)  # sent after session.updated
    deltas: int = 3  # audio deltas per reply
    drop_mid_reply: int | None = None  # abort TCP after this many deltas of a reply
    refuse_resume: bool = False
    close_after_script: bool = False  # end the session (session.closed) after the frames
    frame_gap_s: float = 0.0
    created_delay_s: float = 0.0  # a slow model load: session.created this late
    plant: str | None = None  # in every string a client shows (see the module docstring)
    refuse_open: bool = False  # with plant: the opening session.update gets an error
    drop_every: int | None = None  # abort TCP after this many frames sent on a connection
    on_close: str = "closed"  # session.close: "closed" | "drop" | "ignore"
    hang_resume: bool = False  # session.resume never answered
    stop_reading: bool = False  # after the handshake, the socket is never read again


@dataclass
class Hostile:
    """A running hostile server."""

    kind: str
    url: str
    port: int
    ca_file: Path | None = None
    connections: int = 0
    received: list[Any] = field(default_factory=list)  # decoded client frames, in order


def event(etype: str, seq: int | None = None, **fields: Any) -> dict[str, Any]:
    """A server event as the reference peer shapes it (docs/protocol.md §2, §4)."""
    out: dict[str, Any] = {"type": etype, "event_id": "event_" + "1" * 32, **fields}
    if seq is not None:
        out["server_event_seq"] = seq
    return out


def session_created(plant: str | None = None) -> dict[str, Any]:
    session: dict[str, Any] = {
        "id": SESSION_ID,
        "object": "realtime.session",
        "state": "open",
        "capabilities": {"supports_session_resume": True, "supports_client_commit": True},
    }
    if plant is not None:
        session["id"] = SESSION_ID + plant
        session["model"] = plant
        session["capabilities"]["implementation_level"] = plant
    return event(
        "session.created", session=session, attachment_generation=1, resume_token="tok-" + "a" * 40
    )


def planted_error(plant: str, seq: int | None = None) -> dict[str, Any]:
    error = {"type": "invalid_request_error", "code": plant, "message": plant}
    return event("error", seq, error=error)


def reply_frames(
    seq: int, deltas: int, response_id: str = RESPONSE_ID, transcript: str | None = None
) -> list[dict[str, Any]]:
    """One complete reply (docs/protocol.md §4.2), sequenced from ``seq``."""
    frames = [
        event("response.created", response_id=response_id, response={"id": response_id}),
        event("response.speak", response_id=response_id, metadata={"epoch": 0}),
    ]

    for k in range(deltas):
        frames.append(
            event(
                "response.output_audio.delta",
                response_id=response_id,
                item_id=f"item_{response_id}",
                delta=DELTA_B64,
                format="pcm16",
                sample_rate_hz=24000,
                metadata={"epoch": 0, "audio_duration_ms": 100 * (k + 1)},
            )
        )
    if transcript is not None:
        frames.append(
            event(
                "response.output_audio_transcript.delta",
                response_id=response_id,
                item_id=f"item_{response_id}",
                delta=transcript,
            )
        )
    frames.append(
        event(
            "response.done",
            response_id=response_id,
            response={"id": response_id, "status": "completed"},
        )
    )
    for i, frame in enumerate(frames):
        frame["server_event_seq"] = seq + i
    return frames


class _Duplex:
    """The ``duplex`` kind's connection handler (one per server, state per connection)."""

    def __init__(self, server: Hostile, script: Script) -> None:
        self.server = server
        self.script = script
        self.replies = 0

    async def __call__(self, ws: ServerConnection) -> None:
        seq = 0
        sent = 0
        script = self.script

        async def send(data: Frame) -> None:  # drop_every: the connection ends after N frames
            nonlocal sent
            await ws.send(data)
            sent += 1
            if script.drop_every is not None and sent >= script.drop_every:
                ws.transport.abort()
                raise ConnectionClosed(None, None)

        try:
            async for raw in ws:
                frame = _decode(raw)
                self.server.received.append(frame)
                etype = frame.get("type") if isinstance(frame, dict) else None
                if etype == "session.update":
                    plant = self.script.plant
                    await asyncio.sleep(self.script.created_delay_s)
                    if plant is not None and self.script.refuse_open:
                        await send(json.dumps(planted_error(plant)))
                        ws.transport.abort()
                        return
                    await send(json.dumps(session_created(plant)))
                    seq += 1
                    await send(json.dumps(event("session.updated", seq, session={})))
                    if script.stop_reading:  # the client's writes back up from here on
                        await asyncio.Event().wait()
                    if plant is not None:
                        seq += 1
                        await send(json.dumps(planted_error(plant, seq)))
                    for extra in self.script.after_handshake:
                        if self.script.frame_gap_s:
                            await asyncio.sleep(self.script.frame_gap_s)
                        await send(extra)
                        seq = max(seq, _seq_of(extra))  # later replies number after it
                    if self.script.close_after_script:
                        seq += 1
                        await send(json.dumps(event("session.closed", seq, reason="bye")))
                        await ws.close()
                        return
                elif etype == "session.resume":
                    if script.hang_resume:
                        continue
                    if self.script.refuse_resume:
                        err = {
                            "type": "invalid_request_error",
                            "code": "invalid_resume_token",
                            "message": "resume token does not match",
                        }
                        await send(json.dumps(event("error", error=err)))
                        ws.transport.abort()
                        return
                    seq = int(frame.get("last_received_server_event_seq") or 0)
                    resumed = event(
                        "session.resumed",
                        session_id=SESSION_ID,
                        session={"id": SESSION_ID},
                        attachment_generation=2,
                        resume_token="tok-" + "b" * 40,
                    )
                    await send(json.dumps(resumed))
                elif etype == "session.heartbeat":
                    seq += 1
                    await send(json.dumps(event("session.heartbeat_ack", seq)))
                elif etype == "session.close":
                    if script.on_close == "drop":
                        ws.transport.abort()
                        return
                    if script.on_close == "ignore":
                        continue
                    seq += 1
                    await send(json.dumps(event("session.closed", seq, reason="client_close")))
                    await ws.close()
                    return
                elif etype == "response.create" or (
                    etype == "input_audio_buffer.commit" and frame.get("response_create")
                ):
                    self.replies += 1
                    rid = f"resp-{SESSION_ID}-0-{self.replies:08x}"
                    frames = reply_frames(seq + 1, self.script.deltas, rid, self.script.plant)
                    for i, reply in enumerate(frames):
                        if (
                            self.script.drop_mid_reply is not None
                            and i == 2 + self.script.drop_mid_reply
                        ):
                            ws.transport.abort()
                            return
                        await send(json.dumps(reply))
                        seq = reply["server_event_seq"]
        except ConnectionClosed:
            return


def _seq_of(frame: Frame) -> int:
    """The seq a scripted frame states, when it states a usable one (else 0)."""
    decoded = _decode(frame)
    seq = decoded.get("server_event_seq") if isinstance(decoded, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq < 2**31 else 0


def _decode(raw: Frame) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


async def _read_forever(ws: ServerConnection) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for _ in ws:
            pass


def _first_then(action: Callable[[ServerConnection], Any]) -> Callable[[ServerConnection], Any]:
    """A handler that waits for the client's first frame, then does ``action``."""

    async def handler(ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            await ws.recv()
            await action(ws)
            await _read_forever(ws)

    return handler


async def _abort(ws: ServerConnection) -> None:
    ws.transport.abort()


async def _close_frame(ws: ServerConnection) -> None:
    await ws.close(1011, "going away")


def _send(data: Frame) -> Callable[[ServerConnection], Any]:
    async def send(ws: ServerConnection) -> None:
        await ws.send(data)

    return send


GARBAGE: dict[str, Frame] = {
    "garbage_text": "<html>this is not JSON</html>",
    "garbage_binary": b"\x00\x01\x02binary frame\xff",
    "garbage_array": "[1, 2, 3]",
}

_HTTP_PAGE = b"<html><body>It works!</body></html>"


def _http_answer(status: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: text/html\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def _tls_contexts(tmp: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context with a certificate for 127.0.0.1 signed by a throwaway CA (trustme:
    what it is made for; hand-made certificates need a dozen fields right), and the CA's PEM."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    ca_file = tmp / "hostile-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return context, ca_file


@contextlib.asynccontextmanager
async def hostile(
    kind: str, *, script: Script | None = None, tls: bool = False, path: str = "/v1/realtime"
) -> AsyncIterator[Hostile]:
    """Start one hostile server of ``kind`` (see the module docstring) on 127.0.0.1."""
    scheme = "wss" if tls else "ws"
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        context, ca_file = _tls_contexts(Path(tmp)) if tls else (None, None)
        if kind == "nothing":
            port = free_port()
            yield Hostile(kind, f"{scheme}://127.0.0.1:{port}{path}?duplex=1", port)
            return
        server_state = Hostile(kind, "", 0, ca_file=ca_file)
        ws_handler = _ws_handler(kind, server_state, script or Script())
        if ws_handler is not None:

            async def counted(ws: ServerConnection) -> None:
                server_state.connections += 1
                await ws_handler(ws)

            server: Any = await serve(
                counted, "127.0.0.1", 0, ssl=context, compression=None, max_size=None
            )
        else:
            server = await asyncio.start_server(
                _tcp_handler(kind, server_state), "127.0.0.1", 0, ssl=context
            )
        port = int(next(iter(server.sockets)).getsockname()[1])
        server_state.port = port
        server_state.url = f"{scheme}://127.0.0.1:{port}{path}?duplex=1"
        try:
            yield server_state
        finally:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5.0)


def _ws_handler(
    kind: str, state: Hostile, script: Script
) -> Callable[[ServerConnection], Any] | None:
    if kind == "hang":
        return _read_forever
    if kind in GARBAGE:
        return _first_then(_send(GARBAGE[kind]))
    if kind == "drop_after_upgrade":
        return _abort
    if kind == "close_after_upgrade":
        return _close_frame
    if kind == "duplex":
        return _Duplex(state, script)
    return None


def _tcp_handler(kind: str, state: Hostile) -> Callable[..., Any]:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.connections += 1
        try:
            if kind == "silent_tcp":
                await reader.read()  # until the client gives up
                return
            if kind == "not_http":
                writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
                await writer.drain()
                return
            with contextlib.suppress(asyncio.IncompleteReadError):
                await reader.readuntil(b"\r\n\r\n")
            if kind == "plain_http":
                writer.write(_http_answer("200 OK", _HTTP_PAGE))
            elif kind == "http_404":
                writer.write(_http_answer("404 Not Found", b'{"detail":"Not Found"}'))
            else:
                raise ValueError(f"unknown hostile server kind {kind!r}")
            await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return handler


#: every kind, for parametrised tests
KINDS = (
    "hang",
    *GARBAGE,
    "drop_after_upgrade",
    "close_after_upgrade",
    "duplex",
    "plain_http",
    "http_404",
    "silent_tcp",
    "not_http",
    "nothing",
)


# --------------------------------------------------------------------------------------------
# Malformed server streams (issue 16.4): shared by the hypothesis suite and bench/fuzz_client
# --------------------------------------------------------------------------------------------

#: Values a broken server puts where a field belongs.
WEIRD_VALUES: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    1.5,
    2**63,
    2**64 + 1,
    1e308,
    -1e308,
    "",
    "x" * 300,
    "not base64 !!",
    "\u00e9\u00e9\u00e9",
    [],
    [1, "a"],
    {},
    {"nested": {"deep": [None]}},
)

#: Streams that are not frames of the protocol at all.
GARBAGE_FRAMES: tuple[Frame, ...] = (
    "not json at all",
    '{"type": "response.done", ',
    "[]",
    "42",
    '"a string"',
    "null",
    b"\x00\xff binary",
    b"",
    '{"type": "response.created", "response_id": "r", "x": 1e400}',
)


def _valid_frames(seq: int, rng: Any) -> list[dict[str, Any]]:
    """A well-formed stretch of a session: one reply plus the Tier-3 chatter around it."""
    rid = f"resp-{SESSION_ID}-0-{rng.randrange(1 << 32):08x}"
    frames = reply_frames(seq, rng.randrange(0, 4), rid)
    extras = [
        event("session.heartbeat_ack", session_id=SESSION_ID),
        event("response.listen", session_id=SESSION_ID, epoch=0, response={"status": "listening"}),
        event("input_audio_buffer.speech_started", audio_start_ms=120, item_id="item_1"),
        event("input_audio_buffer.committed", item_id="item_1", previous_item_id=None, event={}),
        event("playback.acknowledged", event={"item_id": f"item_{rid}", "played_ms": 100}),
        event(
            "error", error={"type": "invalid_request_error", "code": "bad_audio", "message": "x"}
        ),
        event("overlap.decision", epoch=0, action="drop", reason="silence_or_noise"),
    ]
    for extra in rng.sample(extras, rng.randrange(0, 4)):
        frames.insert(rng.randrange(len(frames) + 1), extra)
    for i, frame in enumerate(frames):
        frame["server_event_seq"] = seq + i
    return frames


def _mutate(frame: dict[str, Any], rng: Any) -> Frame | dict[str, Any]:
    """One way a broken server gets ``frame`` wrong."""
    frame = json.loads(json.dumps(frame))
    how = rng.randrange(9)
    keys = [k for k in frame if k != "type"] or ["type"]
    if how == 0:  # a field missing
        frame.pop(rng.choice(keys), None)
    elif how == 1:  # a field of the wrong type or out of range
        frame[rng.choice(keys)] = rng.choice(WEIRD_VALUES)
    elif how == 2:  # a nested field wrong
        for key in ("metadata", "response", "event", "session", "error"):
            if isinstance(frame.get(key), dict):
                inner = frame[key]
                name = rng.choice([*inner, "epoch", "status", "audio_duration_ms", "code"])
                inner[name] = rng.choice(WEIRD_VALUES)
                break
        else:
            frame["metadata"] = rng.choice(WEIRD_VALUES)
    elif how == 3:  # the type itself
        frame["type"] = rng.choice(
            [*WEIRD_VALUES, "response.audio.delta", "duplex.unknown", "session.created"]
        )
    elif how == 4:  # the seq: duplicate, backwards, far ahead, not a number
        seq = frame.get("server_event_seq", 1)
        frame["server_event_seq"] = rng.choice([seq, seq - 1, 1, seq + 1000, "7", 2.5, -3, 0])
    elif how == 5:  # bad audio: not base64, cut mid-quantum, odd bytes
        frame["delta"] = rng.choice(["!!!!", "AAA", "AAAA", "QUJD=", "\u00e9" * 8, ""])
        frame.setdefault("response_id", RESPONSE_ID)
        frame["type"] = "response.output_audio.delta"
        frame["format"] = rng.choice(["pcm16", "wav", "g711_ulaw", "pcm_f32le", "mp3", 5])
        frame["sample_rate_hz"] = rng.choice([24000, 0, -1, 2**40, "24000", 7])
    elif how == 6:  # an unknown response id
        frame["response_id"] = f"resp-{SESSION_ID}-9-{rng.randrange(1 << 32):08x}"
    elif how == 7:  # the session ends, and the stream goes on
        return event("session.closed", frame.get("server_event_seq"), reason="bye")
    else:
        return rng.choice(GARBAGE_FRAMES)
    return frame


def malformed_stream(rng: Any, *, frames: int = 12, mutation_rate: float = 0.4) -> list[Frame]:
    """What a broken server sends after a correct handshake (``session.updated`` is seq 1):
    well-formed events with some mutated (fields missing, mistyped, out of range; types,
    seqs, audio and response ids wrong; garbage frames; events after session.closed).
    ``rng`` is a ``random.Random`` (hypothesis: ``st.randoms()``)."""
    out: list[Frame] = []
    seq = 2
    while len(out) < frames:
        for frame in _valid_frames(seq, rng):
            seq = max(seq, int(frame["server_event_seq"]) + 1)
            item: Frame | dict[str, Any] = frame
            if rng.random() < mutation_rate:
                item = _mutate(frame, rng)
            out.append(item if isinstance(item, str | bytes) else json.dumps(item))
            if len(out) >= frames:
                break
    return out


async def replay_against(stream: list[Frame], script: Script | None = None) -> Any:
    """One replay run through the runner's library entry point (a short clip, a client
    commit, fast pace, 1 s response timeout) against a ``duplex`` server that sends
    ``stream`` right after its correct handshake (and then answers the commit); ``script``
    adds its other ways (``stream`` replaces its ``after_handshake``)."""
    from duplexctl.scenario.config import CliOptions, resolve
    from duplexctl.scenario.parse import load_inputs
    from duplexctl.scenario.runner import Replay

    scenario = load_inputs([CLIP])
    config = resolve(
        CliOptions(turn_detection="none", commit=True, pace="fast", response_timeout_s=1.0),
        scenario.settings,
    )
    script = dataclasses.replace(script or Script(), after_handshake=stream)
    async with hostile("duplex", script=script) as server:
        return await Replay(scenario, config, server.url).run()


def ending_script(rng: Any) -> Script:
    """A server that keeps ending connections (issue 31.3), its ways drawn from ``rng``."""
    return Script(
        drop_every=rng.choice([1, 2, 3, 4, 6, 8]),
        on_close=rng.choice(["closed", "drop", "ignore"]),
        hang_resume=rng.random() < 0.3,
        refuse_resume=rng.random() < 0.1,
    )
