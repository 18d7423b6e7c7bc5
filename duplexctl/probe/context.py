"""What a probe works with: the target, what is known about it, connections that record.

Probes talk to the server two ways, and both feed one trace (the evidence of a failure):

* :class:`ProbeConn` wraps the client core's :class:`DuplexConnection` (handshake, sequence
  de-duplication, invariant checking, resume) for probes that behave like a well-mannered
  client and judge what the server does.
* :class:`RawConn` is a bare ``websockets`` connection for probes that must misbehave on
  purpose (abandon a handshake, resume at a chosen seq, abort TCP, send oversize or broken
  frames); frames are still encoded and parsed by the protocol layer.

:class:`Facts` collects what the run learned about the server — its admission limit (given
with ``--max-sessions``, known from the embedded server's config, or learned from a
rejection's advertised limit), its disconnect grace, its capabilities — so a later probe can
use what an earlier one found instead of measuring it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, Final

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, WebSocketException

from duplexctl.errors import ServerUnreachable
from duplexctl.probe.model import ProbeFailed, ProbeSkipped, TraceEntry
from duplexctl.protocol import codec, ids
from duplexctl.protocol.client_state import (
    AudioDelta,
    ClientSession,
    Happening,
    ResponseDone,
    client_event,
)
from duplexctl.protocol.errors import parse_error
from duplexctl.protocol.settings import SessionSettings
from duplexctl.units import MiB

INPUT_RATE: Final = 16000
CHUNK_MS: Final = 100
# Frame types that say little about lifecycle bugs; left out of the evidence to keep it short.
QUIET_TYPES: Final = frozenset(
    {
        "response.output_audio_transcript.delta",
        "response.output_text.delta",
        "conversation.item.added",
        "conversation.item.created",
        "conversation.item.done",
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_audio_transcript.done",
        "rate_limits.updated",
        "playback.acknowledged",
        "session.event_ack",
    }
)
MAX_TRACE: Final = 2000


@dataclass(slots=True)
class Facts:
    """What the run knows about the server; filled by options and by earlier probes."""

    limit: int | None = None
    limit_source: str | None = None  # option | embedded | advertised
    disconnect_grace_s: float | None = None
    grace_source: str | None = None
    capabilities: dict[str, Any] = field(default_factory=dict)
    embedded: bool = False
    # what every probe session asks for, on top of probe_settings() (--ref-audio, --session)
    base: SessionSettings | None = None
    # the server opens model-native sessions only (extra_body.auto_response required, the
    # Nemotron lane, docs/protocol.md §13): every probe session asks for it; its refusal
    auto_response_only: bool = False
    lane_refusal: str | None = None
    tools: list[dict[str, Any]] | None = None  # probe --tools: what the tool-calls probe declares


def describe(frame: dict[str, Any]) -> str:
    """A short human description of a server frame for the evidence."""
    etype = frame.get("type")
    if etype == "error":
        err = parse_error(frame)
        return f"{err.code}: {err.message}"[:160]
    parts: list[str] = []
    response = frame.get("response")
    rid = frame.get("response_id") or (response.get("id") if isinstance(response, dict) else None)
    if rid:
        parts.append(str(rid))
    if isinstance(response, dict) and response.get("status"):
        parts.append(f"status={response['status']}")
        details = response.get("status_details")
        if isinstance(details, dict) and details.get("reason"):
            parts.append(f"reason={details['reason']}")
    for key in ("reason", "attachment_generation", "item_id", "action"):
        if key in frame and frame[key] is not None and not (key == "item_id" and rid):
            parts.append(f"{key}={frame[key]}")
    session = frame.get("session")
    if isinstance(session, dict) and session.get("id"):
        parts.append(f"session={session['id']}")
    meta = frame.get("metadata")
    if isinstance(meta, dict) and "audio_duration_ms" in meta:
        parts.append(f"audio_ms={meta['audio_duration_ms']} epoch={meta.get('epoch')}")
    return " ".join(parts)


class Trace:
    """Evidence lines with times relative to the probe's start."""

    def __init__(self) -> None:
        self.t0_ns = time.monotonic_ns()
        self.entries: list[TraceEntry] = []
        self.dropped = 0
        self.muted: set[str] = set()  # connection labels whose frames are not recorded

    def ms(self, t_ns: int | None = None) -> float:
        return round(((t_ns or time.monotonic_ns()) - self.t0_ns) / 1e6, 1)

    def add(
        self,
        conn: str,
        direction: str,
        etype: str,
        detail: str = "",
        *,
        seq: int | None = None,
        t_ns: int | None = None,
    ) -> None:
        if conn in self.muted:
            return
        if len(self.entries) >= MAX_TRACE:
            self.dropped += 1
            return
        self.entries.append(TraceEntry(self.ms(t_ns), conn, direction, etype, detail, seq))

    def note(self, text: str) -> None:
        self.add("-", "note", "note", text)

    def frame_in(self, conn: str, frame: dict[str, Any], t_ns: int) -> None:
        seq = frame.get("server_event_seq")
        etype = str(frame.get("type"))
        self.add(
            conn, "in", etype, describe(frame), seq=seq if isinstance(seq, int) else None, t_ns=t_ns
        )

    def frame_out(self, conn: str, event: dict[str, Any] | str, t_ns: int) -> None:
        if isinstance(event, str):
            self.add(conn, "out", "<text>", event[:60], t_ns=t_ns)
            return
        detail = ""
        etype = str(event.get("type"))
        if etype == "session.resume":
            detail = f"last_seq={event.get('last_received_server_event_seq')}"
        elif etype == "session.event_ack":
            detail = f"seq={event.get('server_event_seq')}"
        elif etype == "input_audio_buffer.append":
            audio = event.get("audio")
            detail = f"{len(audio) if isinstance(audio, str) else 0} b64 chars"
        elif etype == "response.cancel" and event.get("response_id"):
            detail = str(event.get("response_id"))
        self.add(conn, "out", etype, detail, t_ns=t_ns)

    def evidence(self, limit: int = 60) -> list[TraceEntry]:
        """The interesting lines (quiet frame types left out), the last ``limit`` of them."""
        kept = [e for e in self.entries if e.type not in QUIET_TYPES]
        return sorted(kept, key=lambda e: e.t_ms)[-limit:]


# --------------------------------------------------------------------------------------------
# Audio the probes send
# --------------------------------------------------------------------------------------------


@cache
def _speech_pcm() -> bytes:
    """One second of real speech (the bundled hello.wav), 16 kHz PCM16.

    Real speech rather than a tone: a server's VAD or RMS gate must take it for speech, and
    the bundled recording is what every other command is tested with.
    """
    from duplexctl.audio import pcm
    from duplexctl.audio.manifest import lookup, recording_path
    from duplexctl.audio.source import load_audio

    path = recording_path("hello.wav")
    clip = load_audio(path, INPUT_RATE)
    rec = lookup(path)
    start_ms = rec.speech_start_ms if rec is not None else 300.0
    start = int(start_ms * INPUT_RATE / 1000)
    return pcm.encode(clip.samples[start : start + INPUT_RATE], "pcm16")


def audio_of(response_id: str) -> Callable[[Happening], bool]:
    """A ``wait_for`` predicate: an audio delta of ``response_id`` (bound now, not at call)."""
    return lambda h: isinstance(h, AudioDelta) and h.response_id == response_id


def done_of(response_id: str) -> Callable[[Happening], bool]:
    """A ``wait_for`` predicate: the ``response.done`` of ``response_id``."""
    return lambda h: isinstance(h, ResponseDone) and h.response_id == response_id


def speech_chunks(ms: int = 600, chunk_ms: int = CHUNK_MS) -> list[bytes]:
    """``ms`` of speech (≤ 1000) as PCM16 chunks of ``chunk_ms``."""
    data = _speech_pcm()
    step = INPUT_RATE * chunk_ms // 1000 * 2
    total = min(len(data), INPUT_RATE * ms // 1000 * 2)
    return [data[i : i + step] for i in range(0, total, step)]


def silence(ms: int) -> bytes:
    return bytes(INPUT_RATE * ms // 1000 * 2)


def probe_settings(
    base: SessionSettings | None = None, *, auto_response: bool = False, **extra: Any
) -> SessionSettings:
    """The session every probe opens: client-committed turns (the lane every server has;
    ``auto_response`` on a server that opens nothing else), explicit formats; ``base``
    carries the user's ``--ref-audio`` / ``--session`` (MiniCPM-o refuses to open without a
    voice clip); ``extra`` merges into the session object last (e.g. idle_timeout_s)."""
    if base is None:
        base = SessionSettings(instructions="duplexctl probe session")
    return replace(
        base,
        turn_detection="none",
        auto_response=auto_response,
        extra={**base.extra, **extra},
    )


# --------------------------------------------------------------------------------------------
# Connections
# --------------------------------------------------------------------------------------------


class ProbeConn:
    """A :class:`DuplexConnection` whose every frame in and out lands in the trace."""

    def __init__(self, ctx: ProbeContext, label: str, conn: Any) -> None:
        self.ctx = ctx
        self.label = label
        self.conn = conn
        self.closed = False
        self._streams: list[asyncio.Task[None]] = []

    @property
    def session(self) -> Any:
        return self.conn.session

    def record(self, h: Happening) -> None:
        if h.frame:
            self.ctx.trace.frame_in(self.label, h.frame, h.recv_ns)
        else:
            detail = f"code={getattr(h, 'code', None)} {getattr(h, 'reason', '')}".strip()
            self.ctx.trace.add(self.label, "net", h.type, detail, t_ns=h.recv_ns)

    async def send(self, event: dict[str, Any]) -> int:
        t = await self.conn.send(event)
        self.ctx.trace.frame_out(self.label, event, t)
        return int(t)

    async def next(self, timeout: float) -> Happening | None:
        """The next happening, or None when the stream ended or nothing came in time."""
        try:
            return await self.conn.next(timeout=max(0.001, timeout))  # type: ignore[no-any-return]
        except TimeoutError:
            return None

    async def wait_for(
        self, predicate: Callable[[Happening], bool], timeout: float, what: str
    ) -> Happening:
        """The first happening matching ``predicate``; ProbeFailed naming ``what`` otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProbeFailed(f"{self.label}: no {what} within {timeout:g} s")
            h = await self.next(remaining)
            if h is None:
                if time.monotonic() < deadline:
                    raise ProbeFailed(f"{self.label}: the session ended before {what}")
                raise ProbeFailed(f"{self.label}: no {what} within {timeout:g} s")
            if predicate(h):
                return h

    async def collect(self, seconds: float) -> list[Happening]:
        """Everything that arrives in the next ``seconds`` (stops early if the stream ends)."""
        out: list[Happening] = []
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            h = await self.next(remaining)
            if h is None:
                if self.conn.connected or time.monotonic() >= deadline:
                    continue
                break
            out.append(h)
        return out

    async def speak(self, ms: int = 600) -> int:
        """Append ``ms`` of speech and commit it asking for a response; returns the commit's
        send time (ns). Appends are not paced: in the client-commit lane nothing depends on
        arrival rate, and it keeps probes short."""
        for chunk in speech_chunks(ms):
            await self.conn.send(self.session.append(chunk))
        self.ctx.trace.add(self.label, "out", "input_audio_buffer.append", f"{ms} ms of speech")
        return await self.send(self.session.commit(response_create=True))

    def stream(self, speech_ms: int = 1000) -> asyncio.Task[None]:
        """Stream ``speech_ms`` of speech, then silence, in real time at the lane's packet
        length (docs/protocol.md §13.1), until the task is cancelled (or :meth:`close`): how a
        model-native session is spoken to, the model answering by itself."""
        packet_ms = self.session.packet_ms(CHUNK_MS, INPUT_RATE).packet_ms
        chunks = speech_chunks(speech_ms, packet_ms)
        self.ctx.trace.add(
            self.label, "out", "input_audio_buffer.append",
            f"streaming {speech_ms} ms of speech, then silence, in {packet_ms} ms packets",
        )  # fmt: skip

        async def run() -> None:
            t = time.monotonic()
            k = 0
            while True:
                data = chunks[k] if k < len(chunks) else silence(packet_ms)
                if self.conn.connected:
                    with contextlib.suppress(Exception):
                        await self.conn.send(self.session.append(data))
                k += 1
                await asyncio.sleep(max(0.0, t + k * packet_ms / 1000 - time.monotonic()))

        task = asyncio.get_running_loop().create_task(run())
        self._streams.append(task)
        return task

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for task in self._streams:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.conn.close(timeout=5.0), 15.0)
        self.ctx.trace.add(self.label, "net", "closed", "")


class RawConn:
    """A bare websocket for deliberately broken behaviour; frames go through the trace.

    What it sends is the probe's own (a resume with a stale token, an event the client
    builders refuse to make), but what it learns from the server — the session's id, its
    rotating resume token, the last sequenced event — is read by a :class:`ClientSession`,
    the one reader of those frames: every received frame is fed to it. Its invariant checker
    is not consulted; what the server got wrong is the probe's to judge, from the frames."""

    def __init__(self, ctx: ProbeContext, label: str, ws: ClientConnection) -> None:
        self.ctx = ctx
        self.label = label
        self.ws = ws
        self.session = ClientSession()
        self.session.begin_connection()
        self.ended = False
        # an opening session.update the server has not answered yet (neither session.created
        # nor an error): the server may be holding a session for it
        self.open_pending = False

    @property
    def session_id(self) -> str | None:
        return self.session.session_id

    @session_id.setter
    def session_id(self, value: str | None) -> None:  # a takeover's session moved here
        self.session.session_id = value

    @property
    def resume_token(self) -> str | None:
        return self.session.resume_token

    @property
    def last_seq(self) -> int:
        return self.session.last_seq

    async def send(self, event: dict[str, Any] | str) -> int:
        text = event if isinstance(event, str) else codec.dumps(event)
        await self.ws.send(text)
        if isinstance(event, dict) and event.get("type") == "session.update":
            self.open_pending = self.session_id is None
        t = time.monotonic_ns()
        self.ctx.trace.frame_out(self.label, event, t)
        return t

    async def recv(self, timeout: float) -> tuple[dict[str, Any] | None, int]:
        """The next frame and its receive time; (None, t) on timeout or when the socket ended
        (``self.ended`` says which)."""
        try:
            async with asyncio.timeout(max(0.001, timeout)):
                raw = await self.ws.recv()
        except TimeoutError:
            return None, time.monotonic_ns()
        except ConnectionClosed:
            self.ended = True
            t = time.monotonic_ns()
            code, reason = self.close_code()
            self.ctx.trace.add(
                self.label, "net", "connection.closed", f"code={code} {reason}", t_ns=t
            )
            return None, t
        t = time.monotonic_ns()
        try:
            frame = codec.loads(raw)
        except codec.FrameDecodeError:
            self.ctx.trace.add(self.label, "in", "<undecodable>", str(raw)[:60], t_ns=t)
            return {"type": "<undecodable>"}, t
        if not isinstance(frame, dict):
            self.ctx.trace.add(self.label, "in", "<not an object>", str(raw)[:60], t_ns=t)
            return {"type": "<not an object>"}, t
        self.ctx.trace.frame_in(self.label, frame, t)
        if frame.get("type") in ("session.created", "error"):
            self.open_pending = False
        self.session.on_message(raw, t)  # id, token and seq; never raises, even on a bug
        return frame, t

    async def recv_until(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float
    ) -> tuple[dict[str, Any] | None, int]:
        """Frames until one matches (returned with its time); (None, t) on timeout/end."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            frame, t = await self.recv(remaining)
            if frame is None:
                if self.ended:
                    return None, t
                continue
            if predicate(frame):
                return frame, t
        return None, time.monotonic_ns()

    def close_code(self) -> tuple[int, str]:
        """(code, reason) of the close frame the server sent; 1006 when there was none."""
        rcvd = self.ws.protocol.close_rcvd
        if rcvd is None:
            return 1006, ""
        return int(rcvd.code), rcvd.reason

    async def wait_closed(self, timeout: float) -> tuple[int, str] | None:
        """Read until the socket ends; its (code, reason), or None if still open."""
        deadline = time.monotonic() + timeout
        while not self.ended and (remaining := deadline - time.monotonic()) > 0:
            await self.recv(remaining)
        return self.close_code() if self.ended else None

    def abort(self) -> None:
        """Drop TCP without a close frame (what a crashed client or a dead network does)."""
        self.ws.transport.abort()
        self.ended = True
        self.ctx.trace.add(self.label, "net", "abort", "client dropped TCP (no close frame)")

    async def open_session(self, settings: SessionSettings | None = None) -> dict[str, Any]:
        """Send the opening session.update; return session.created (ProbeFailed otherwise)."""
        obj = (settings or self.ctx.settings()).to_session_object()
        await self.send(client_event("session.update", session=obj))
        frame, _ = await self.recv_until(
            lambda f: f.get("type") in ("session.created", "error"), 10.0
        )
        if frame is None or frame.get("type") != "session.created":
            what = describe(frame) if frame else "nothing"
            raise ProbeFailed(f"{self.label}: could not open a session ({what})")
        return frame

    async def close_session(self, timeout: float = 5.0) -> bool:
        """session.close and wait for session.closed; True when it came."""
        if self.ended:
            return False
        with contextlib.suppress(ConnectionClosed):
            await self.send(client_event("session.close"))
        frame, _ = await self.recv_until(lambda f: f.get("type") == "session.closed", timeout)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 2.0)
        self.ended = True
        return frame is not None

    def resume_event(self, last_seq: int | None = None, token: str | None = None) -> dict[str, Any]:
        """``session.resume`` with every field as this connection has it, null included (a
        probe may send what ClientSession.resume refuses to build)."""
        return {
            "type": "session.resume",
            "session_id": self.session_id,
            "resume_token": token if token is not None else self.resume_token,
            "last_received_server_event_seq": self.last_seq if last_seq is None else last_seq,
            "event_id": ids.client_event_id(),
        }


class ProbeContext:
    """One probe's view of the run: target, facts, trace, deadline, and connection helpers."""

    def __init__(
        self,
        url: str,
        facts: Facts,
        *,
        api_key: str | None = None,
        deadline: float | None = None,
    ) -> None:
        from duplexctl.client.connection import with_autostart_off

        self.given_url = url  # for messages: the URL without our own autostart=0
        self.url = with_autostart_off(url)
        self.facts = facts
        self.api_key = api_key
        self.deadline = deadline
        self.trace = Trace()
        self.findings: list[str] = []
        self.last_refusal: str | None = None  # what the server said to the last refused open
        self._conns: list[ProbeConn] = []
        self._raws: list[RawConn] = []
        self._counter = 0

    def note(self, text: str) -> None:
        self.trace.note(text)

    def settings(self, **extra: Any) -> SessionSettings:
        """The probe session's settings (the user's base + ``extra`` in the session object)."""
        return probe_settings(self.facts.base, auto_response=self.facts.auto_response_only, **extra)

    def require_client_turns(self, what: str) -> None:
        """Skip where there is no client-committed turn to drive: the server opens
        model-native sessions only (docs/protocol.md §13), where the model answers by itself."""
        if self.facts.auto_response_only:
            raise ProbeSkipped(
                f"{what} needs client-committed turns (commit + response.create); this server "
                f"opens model-native sessions only ({self.facts.lane_refusal}), where the "
                "model decides when to answer"
            )

    def finding(self, text: str) -> None:
        """A measured fact worth printing with the verdict (and noted in the trace)."""
        self.findings.append(text)
        self.trace.note(text)

    def remaining_s(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def label(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def capability(self, name: str) -> Any:
        return self.facts.capabilities.get(name)

    def require(self, name: str) -> None:
        """Skip unless the server advertises ``name`` (an unknown flag counts as present)."""
        if self.facts.capabilities.get(name, True) is False:
            raise ProbeSkipped(f"the server advertises {name}: false")

    async def open(
        self,
        label: str | None = None,
        settings: SessionSettings | None = None,
        *,
        auto_resume: bool = False,
        heartbeat_s: float | None = None,
    ) -> ProbeConn:
        """A well-mannered session (ProbeFailed when the server refuses it)."""
        pc = await self.try_open(
            label, settings, auto_resume=auto_resume, heartbeat_s=heartbeat_s, refusal_ok=False
        )
        assert pc is not None
        return pc

    async def try_open(
        self,
        label: str | None = None,
        settings: SessionSettings | None = None,
        *,
        auto_resume: bool = False,
        heartbeat_s: float | None = None,
        refusal_ok: bool = True,
    ) -> ProbeConn | None:
        """Like :meth:`open`, but None when the server refuses these *settings* (any
        handshake error but a capacity rejection) and ``refusal_ok``."""
        from duplexctl.client.connection import (
            ConnectionOptions,
            DuplexConnection,
            HandshakeFailed,
            OpenFailed,
        )

        label = label or self.label("s")
        options = ConnectionOptions(
            heartbeat_s=heartbeat_s,
            auto_resume=auto_resume,
            resume_attempts=1,
            resume_timeout_s=5.0,
            close_timeout_s=5.0,
        )
        pc = ProbeConn(self, label, None)
        self.trace.add(label, "net", "connect", "")
        try:
            conn = await DuplexConnection.open(
                self.url,
                settings or self.settings(),
                api_key=self.api_key,
                timeout=10.0,
                options=options,
                listeners=[pc.record],
            )
        except HandshakeFailed as exc:
            if refusal_ok:
                self.trace.add(label, "in", "error", str(exc))
                self.last_refusal = exc.error.code if exc.error is not None else str(exc)
                return None
            raise ProbeFailed(f"{label}: could not open a session: {exc}") from None
        except OpenFailed as exc:
            raise ProbeFailed(f"{label}: could not open a session: {exc}") from None
        pc.conn = conn
        self.trace.add(label, "out", "session.update", "", t_ns=conn.timings.t_update_sent_ns)
        if not self.facts.capabilities:
            self.facts.capabilities = dict(conn.session.capabilities)
        self._conns.append(pc)
        return pc

    async def raw(
        self, label: str | None = None, *, url: str | None = None, quiet: bool = False
    ) -> RawConn:
        """A bare websocket on the duplex route (autostart off); ``quiet``: keep its frames
        out of the evidence (repeated polling would drown everything else)."""
        label = label or self.label("r")
        if quiet:
            self.trace.muted.add(label)
        from duplexctl.client.target import process_tls

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        target = url or self.url
        try:
            ws = await asyncio.wait_for(
                ws_connect(
                    target,
                    ssl=process_tls().context() if target.startswith("wss://") else None,
                    compression=None,
                    max_size=64 * MiB,
                    max_queue=None,
                    proxy=None,
                    open_timeout=10.0,
                    additional_headers=headers,
                    user_agent_header="duplexctl-probe",
                ),
                15.0,
            )
        except (OSError, WebSocketException, TimeoutError) as exc:
            raise ServerUnreachable(f"cannot connect to {url or self.given_url}: {exc}") from None
        self.trace.add(label, "net", "connect", "")
        raw = RawConn(self, label, ws)
        self._raws.append(raw)
        return raw

    async def raw_session(self, label: str | None = None, **extra: Any) -> RawConn:
        raw = await self.raw(label)
        await raw.open_session(self.settings(**extra))
        frame, _ = await raw.recv_until(lambda f: f.get("type") == "session.updated", 5.0)
        if frame is None:
            raise ProbeFailed(f"{raw.label}: no session.updated after session.created")
        return raw

    async def reclaim(self, raw: RawConn) -> None:
        """End a session whose socket was dropped: resume it and close it, so it does not
        hold an admission slot for the server's whole disconnect grace."""
        if raw.session_id is None or raw.resume_token is None:
            return
        again = await self.raw(raw.label + "'")
        try:
            await again.send(raw.resume_event())
            frame, _ = await again.recv_until(
                lambda f: f.get("type") in ("session.resumed", "error", "session.resync_required"),
                5.0,
            )
            if frame is not None and frame.get("type") == "session.resumed":
                await again.close_session()
        finally:
            again.ws.transport.abort()

    async def cleanup(self) -> None:
        """Close everything the probe opened (every session ends with session.close)."""
        for pc in self._conns:
            await pc.close()
        for raw in self._raws:
            # a session.update without its session.created yet (the probe was stopped in
            # the handshake) still opens a session: close it too, the server answers in order
            if not raw.ended and (raw.session_id is not None or raw.open_pending):
                with contextlib.suppress(Exception):
                    await raw.close_session(3.0)
            with contextlib.suppress(Exception):
                raw.ws.transport.abort()
