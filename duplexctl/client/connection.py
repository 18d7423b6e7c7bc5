"""The asyncio websocket transport around :class:`ClientSession` (docs/protocol.md §1, §6.6, §6.8).

Thin on purpose: every protocol decision lives in the sans-I/O layer — ClientSession and
its lifecycle table (:mod:`duplexctl.protocol.lifecycle`), what answers a handshake
(:mod:`duplexctl.protocol.handshake`), what a failure to connect is called
(:mod:`duplexctl.client.failures`) and what the client is doing with its socket
(:mod:`duplexctl.client.attachment`); this module owns sockets, time and tasks, and acts on
what those return. What it adds, and why:

* **Raw timestamps** for docs/metrics.md: ``recv_ns`` is taken the moment a frame is read off the
  socket (before JSON decoding and de-duplication); :meth:`DuplexConnection.send` returns the
  monotonic ns right after the websocket send returned. ``connect_ms``, ``handshake_ms``,
  ``close_ms``, heartbeat RTTs and every resume's split are kept in ``timings``.
* **Handshake** with typed failures: a capacity error is :class:`AdmissionRejected` (with the
  advertised limit), any other error :class:`HandshakeFailed`, anything else that keeps the
  session from opening :class:`OpenFailed`; all are ``errors.ServerUnreachable`` (exit code
  3) and carry a ``cause`` (:mod:`duplexctl.client.causes`: what the server did, named once),
  the docs/metrics.md ``admission`` outcome it maps to, ``time_to_reject_ms`` for load, and a one
  line message naming what happened (issue 17.1, 17.2, 17.7): a frame that is not the
  protocol fails the open at once with its first bytes, rather than after the timeout.
  ``give_up`` (an event: the run stopped) ends an open that is still waiting, so a command
  stopping never waits out a hanging server's timeout.
* **Bounded and quiet on any server.** Every frame goes through ClientSession.on_message,
  which records what does not follow the protocol as a violation and never raises; a socket
  that closes at any moment (even with the upgrade answer) is an OpenFailed or a
  ConnectionLost, never an exception from the receive path.
* **Journal hygiene**: ``session.event_ack`` for processed sequenced events when
  :class:`~duplexctl.protocol.playback_duty.EventAckDuty` says one is owed (every
  ``ack_batch`` events or ``ack_interval_s``), so the server's 8 MiB replay journal is trimmed
  — unless ``event_acks`` is off because the caller's PlaybackDuty sends them (replay, talk);
  ``session.heartbeat`` when nothing was sent for ``heartbeat_s`` so idle sessions survive.
* **Resume** on a new socket (token rotation and replay de-dup are ClientSession's): bounded
  retries with jittered exponential backoff; the fatal codes (``names.FATAL_RESUME_CODES`` and
  ``session.resync_required``) stop at once. Unexpected loss resumes automatically when
  ``auto_resume`` is on; :meth:`drop` is fault injection (TCP abort, no close frame).
* **Always close**: :meth:`close` sends ``session.close`` and waits for ``session.closed`` on
  every exit path — the async context manager calls it on errors and on cancellation (Ctrl-C),
  and a dropped session is resumed first so its admission slot is freed now rather than after
  the server's disconnect grace.
* **Every wait is bounded** (docs/protocol.md §6.8, issue 31.3): the open by its timeout, a
  resume by :meth:`ConnectionOptions.resume_bound_s`, a send the server does not read by
  ``drain_timeout_s`` (then the socket is dropped: a drop like any other), and :meth:`close`
  — a resume still running, one reattach, ``session.close`` → ``session.closed`` — by
  ``close_timeout_s`` in all, plus the socket's own close handshake
  (:meth:`ConnectionOptions.close_bound_s`); a server that ends the connection instead of
  answering ``session.close`` ends the wait at once.

Happenings go to a queue (:meth:`next`, ``async for``) and to listeners registered with
:meth:`add_listener`, called synchronously at receive time — that is the hook for the
playback clock, which sends its acks with :meth:`ack_playback`. The socket is
:mod:`duplexctl.client.websocket` (synchronous sends, messages handed over inside
``data_received``): there is no reader task, so nothing here is woken per received frame.

Public API::

    async with connect(url, settings, api_key=None, timeout=30.0, options=None) as conn: ...
    conn = await DuplexConnection.open(url, settings, *, api_key=None, timeout=30.0,
                                       options=None, listeners=(), give_up=None)
    conn = await DuplexConnection.attach(url, session, *, api_key=None, options=None)
    conn.session: ClientSession;  conn.timings: ConnectionTimings;  conn.connected: bool
    await conn.send(event) -> int              # send_ns
    await conn.next(timeout=None) -> Happening | None     # None: the stream ended
    await conn.wait_for(predicate, timeout) -> Happening
    conn.add_listener(fn: Callable[[Happening], None])
    await conn.ack_playback(response_id, played_ms, committed_ms=None) -> int
    await conn.heartbeat() -> int
    await conn.drop(auto_resume=False) -> int  # t_drop_ns
    await conn.resume() -> ResumeRecord        # raises ResumeFailed
    await conn.close(reason="client_close", timeout=None)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from websockets.exceptions import (
    ConnectionClosed,
    InvalidURI,
    WebSocketException,
)

from duplexctl.aio import cancel_and_wait
from duplexctl.client import failures
from duplexctl.client.attachment import Attachment, Move, after
from duplexctl.client.backoff import Backoff
from duplexctl.client.causes import ADMISSION, Cause
from duplexctl.client.target import TlsPolicy, process_tls
from duplexctl.client.websocket import (
    CLOSE_TCP_TIMEOUT_S,
    Message,
    WebSocket,
    open_websocket,
)
from duplexctl.errors import BadInput, ServerUnreachable
from duplexctl.protocol import codec
from duplexctl.protocol.client_state import (
    ClientSession,
    ErrorReceived,
    Happening,
    HeartbeatAck,
    SessionClosed,
    ViolationRecorded,
)
from duplexctl.protocol.errors import WireError
from duplexctl.protocol.handshake import (
    RESUME_TIMED_OUT,
    RESUME_TRANSPORT_ERROR,
    OpenAnswer,
    ResumeAnswer,
    open_answer,
    resume_answer,
    resume_blocked,
)
from duplexctl.protocol.invariants import Violation
from duplexctl.protocol.playback_duty import EVENT_ACK_BATCH, EVENT_ACK_EVERY_S, EventAckDuty
from duplexctl.protocol.settings import SessionSettings
from duplexctl.units import MiB

# --------------------------------------------------------------------------------------------
# Errors (all exit code 3: the server could not be reached or refused the session)
# --------------------------------------------------------------------------------------------


class OpenFailed(ServerUnreachable):
    """The session could not be opened: ``cause`` says why (one word of
    :class:`~duplexctl.client.causes.Cause`), the message says it in one line.

    ``admission`` is the docs/metrics.md outcome the cause maps to; ``gave_up`` is True when the
    attempt was still waiting when its ``give_up`` event was set (the run stopped)."""

    def __init__(
        self,
        message: str,
        *,
        cause: Cause,
        error: WireError | None = None,
        connect_ms: float | None = None,
        time_to_reject_ms: float | None = None,
        gave_up: bool = False,
    ) -> None:
        super().__init__(message)
        self.cause = cause
        self.error = error
        self.connect_ms = connect_ms
        self.time_to_reject_ms = time_to_reject_ms
        self.gave_up = gave_up

    @property
    def admission(self) -> str:
        """rejected_capacity | rejected_other | transport_error | timeout (docs/metrics.md)."""
        return ADMISSION[self.cause]


class AdmissionRejected(OpenFailed):
    """The server is full (``resource_exhausted`` / ``duplex_session_busy``)."""

    @property
    def limit(self) -> int | None:
        """N of ``duplex_session_capacity_exhausted: limit=N`` when the server states it."""
        return self.error.advertised_limit if self.error is not None else None


class HandshakeFailed(OpenFailed):
    """The server answered the opening ``session.update`` with another error code."""


class ResumeFailed(ServerUnreachable):
    """Resuming gave up; ``record.outcome`` names why (a code, or transport_error)."""

    def __init__(self, message: str, record: ResumeRecord, *, fatal: bool) -> None:
        super().__init__(message)
        self.record = record
        self.fatal = fatal


class ConnectionLostError(ServerUnreachable):
    """The socket is gone and no resume is possible or in progress."""


# --------------------------------------------------------------------------------------------
# Records and options
# --------------------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class ConnectionLost(Happening):
    """Local happening (not from the server): the socket went away.

    ``resuming`` says whether an automatic resume was started; when it fails a second
    ConnectionLost with ``resuming=False`` follows and the stream ends.
    """

    code: int | None
    reason: str
    resuming: bool


@dataclass(slots=True)
class ResumeRecord:
    """One resume (docs/metrics.md: resume_ms = reconnect_ms + resume_handshake_ms, roughly)."""

    t_drop_ns: int
    automatic: bool
    attempts: int = 0
    outcome: str | None = None  # resumed | session_resume_expired | resync_required | <code> | …
    reconnect_ms: float | None = None  # t_drop -> new socket open (backoff included)
    resume_handshake_ms: float | None = None  # send session.resume -> recv session.resumed
    resume_ms: float | None = None  # t_drop -> recv session.resumed
    t_resumed_ns: int | None = None
    resumed_from_seq: int | None = None
    error: WireError | None = None


@dataclass(slots=True)
class ConnectionTimings:
    """Raw monotonic timestamps (ns) and the derived session figures of docs/metrics.md."""

    t_connect_start_ns: int | None = None
    t_open_ns: int | None = None
    t_update_sent_ns: int | None = None
    t_created_ns: int | None = None
    t_close_sent_ns: int | None = None
    t_closed_ns: int | None = None
    connect_ms: float | None = None
    handshake_ms: float | None = None
    close_ms: float | None = None
    heartbeat_rtts_ms: list[float] = field(default_factory=list)
    drops_ns: list[int] = field(default_factory=list)
    resumes: list[ResumeRecord] = field(default_factory=list)


@dataclass(slots=True)
class ConnectionOptions:
    """Transport knobs; the defaults suit a live session against a real server."""

    open_timeout_s: float = 10.0  # TCP + upgrade
    heartbeat_s: float | None = 10.0  # None: never; sent only after this long without a send
    ack_interval_s: float = EVENT_ACK_EVERY_S  # session.event_ack cadence (playback_duty.py)
    ack_batch: int = EVENT_ACK_BATCH
    auto_resume: bool = True
    resume_attempts: int = 5
    resume_timeout_s: float = 10.0  # per attempt: open + session.resumed
    backoff_min_s: float = 0.25
    backoff_max_s: float = 4.0
    close_timeout_s: float = 10.0  # close(): everything, session.closed included
    drain_timeout_s: float = 10.0  # a send the server does not read: then the socket is dropped
    max_size: int = 64 * MiB  # some server events exceed websockets' 1 MiB default
    queue_happenings: bool = True  # False: listeners only (load, to bound memory)
    # False: the caller's PlaybackDuty sends session.event_ack (one decision, one sender)
    event_acks: bool = True
    tls: TlsPolicy | None = None  # wss:// trust; None: the process's (client.target.use_tls)

    @property
    def resume_bound_s(self) -> float:
        """The longest a resume takes before it succeeds or gives up: every attempt's
        ``resume_timeout_s`` and the longest jittered back-off between them."""
        waits = Backoff(self.backoff_min_s, self.backoff_max_s).bound(self.resume_attempts - 1)
        return self.resume_attempts * self.resume_timeout_s + waits

    @property
    def close_bound_s(self) -> float:
        """The longest :meth:`DuplexConnection.close` takes (with its default timeout)."""
        return self.close_timeout_s + CLOSE_TCP_TIMEOUT_S


def with_autostart_off(url: str) -> str:
    """``url`` with ``autostart=0`` unless it already says autostart/resume: with ``?model=``
    the server would otherwise open a default session before our ``session.update``."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(key in ("autostart", "resume") for key, _ in query):
        return url
    query.append(("autostart", "0"))
    return urlunsplit(parts._replace(query=urlencode(query)))


def _frame_words(h: ViolationRecorded) -> str:
    """What a violation's frame was, for a one-line message: its kind and first bytes."""
    v = h.violation
    words = f"a malformed event ({v.detail})" if v.name == "malformed_event" else v.detail
    return f"{words}: {v.frame}" if v.frame else words


def _how_closed(ws: WebSocket) -> str:
    """How the server ended a connection: a close frame's code and reason, or none."""
    rcvd = ws.protocol.close_rcvd
    if rcvd is None:
        return "TCP closed, no close frame"
    reason = f" {rcvd.reason!r}" if rcvd.reason else ""
    return f"close frame {rcvd.code}{reason}"


def _ms(start_ns: int | None, end_ns: int | None) -> float | None:
    if start_ns is None or end_ns is None:
        return None
    return (end_ns - start_ns) / 1e6


_END: Final = object()  # queue sentinel: the stream of happenings has ended


# --------------------------------------------------------------------------------------------
# The connection
# --------------------------------------------------------------------------------------------


class DuplexConnection:
    """One client session over one or more sockets (resumes). See the module docstring."""

    def __init__(
        self,
        url: str,
        session: ClientSession,
        *,
        api_key: str | None = None,
        options: ConnectionOptions | None = None,
        listeners: Iterable[Callable[[Happening], None]] = (),
    ) -> None:
        self.given_url = url  # what messages name: never our own additions (autostart=0)
        self.url = with_autostart_off(url)
        self.session = session
        self.options = options or ConnectionOptions()
        self.timings = ConnectionTimings()
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._listeners: list[Callable[[Happening], None]] = list(listeners)
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._ws: WebSocket | None = None
        self._maintenance: asyncio.Task[None] | None = None
        self._resume_task: asyncio.Task[ResumeRecord] | None = None
        self.attachment = Attachment.ATTACHED  # what the client does with it (attachment.py)
        self._ended = False  # the stream of happenings has ended (its sentinel is queued)
        self._closed_event = asyncio.Event()
        self._last_send_ns = time.monotonic_ns()
        self._heartbeats_sent: list[int] = []
        opts = self.options
        self._event_acks = (
            EventAckDuty(session, every_s=opts.ack_interval_s, batch=opts.ack_batch)
            if opts.event_acks
            else None
        )
        self._violations: list[Violation] = []  # recorded while digesting the current frame
        session.checker.on_violation = self._violations.append
        self.listener_errors: list[Exception] = []  # exceptions raised by listeners

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        url: str,
        settings: SessionSettings,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        options: ConnectionOptions | None = None,
        listeners: Iterable[Callable[[Happening], None]] = (),
        give_up: asyncio.Event | None = None,
    ) -> DuplexConnection:
        """Connect, send the opening ``session.update`` and wait for ``session.created``.

        Raises :class:`OpenFailed` (with its ``cause``) when that does not happen — also,
        at once, when ``give_up`` is set while it is still waiting."""
        session = ClientSession(
            output_format=settings.output_format, output_rate=settings.output_rate
        )
        self = cls(url, session, api_key=api_key, options=options, listeners=listeners)
        update = session.session_update(settings.to_session_object())  # BadInput before I/O
        try:
            if give_up is None:
                await self._open(update, timeout)
            else:
                await self._open_unless(give_up, update, timeout)
        except BaseException as exc:
            if _abandoned(exc):
                # the open is failing already: its settling may be cancelled again or fail
                # quietly, and the open's own exception is what is raised
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.shield(self._settle_handshake())
            await self._abort_quietly()
            raise
        why = session.unsupported_input()
        if why is not None:  # e.g. video on every append: end the session, say why
            with contextlib.suppress(Exception):  # the refusal below is the answer
                await self.close(timeout=5.0)
            raise OpenFailed(
                f"{self._where()}: {why}",
                cause=Cause.UNSUPPORTED_INPUT,
                connect_ms=self.timings.connect_ms,
            )
        return self

    async def _settle_handshake(self, wait_s: float = 2.0) -> None:
        """The open was abandoned (Ctrl-C, SIGTERM, the run stopping) after session.update
        went out but before session.created came back. The server has created the session,
        or is about to, and a dropped socket would hold its slot for the whole disconnect
        grace; so wait briefly for session.created, and :meth:`_abort_quietly` closes the
        session as every session is closed (session.close)."""
        ws, t = self._ws, self.timings
        if ws is None or t.t_update_sent_ns is None or self.session.created:
            return
        deadline = time.monotonic() + wait_s
        with contextlib.suppress(TimeoutError, ConnectionClosed):
            while not self.session.created:
                for h in await self._recv_handshake(ws, deadline):
                    if isinstance(h, ErrorReceived) and h.seq is None:
                        return  # refused: no session to close

    async def _open_unless(
        self, give_up: asyncio.Event, update: dict[str, Any], timeout: float
    ) -> None:
        """:meth:`_open`, abandoned as soon as ``give_up`` is set (OpenFailed, gave_up)."""
        opening = asyncio.ensure_future(self._open(update, timeout))
        stopping = asyncio.ensure_future(give_up.wait())
        try:
            await asyncio.wait({opening, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not opening.done():
                await cancel_and_wait(opening)
        if not opening.cancelled():
            opening.result()  # opened, or its OpenFailed
            return
        t = self.timings
        started = t.t_connect_start_ns or time.monotonic_ns()
        waited = (time.monotonic_ns() - started) / 1e9
        upgraded = t.t_open_ns is not None
        raise OpenFailed(
            f"{self._where()}: gave up after {waited:.1f} s without "
            + ("session.created" if upgraded else "a websocket connection")
            + " (the run stopped)",
            cause=Cause.HANDSHAKE_TIMEOUT if upgraded else Cause.TIMEOUT,
            connect_ms=t.connect_ms,
            gave_up=True,
        )

    @classmethod
    async def attach(
        cls,
        url: str,
        session: ClientSession,
        *,
        api_key: str | None = None,
        options: ConnectionOptions | None = None,
        listeners: Iterable[Callable[[Happening], None]] = (),
    ) -> DuplexConnection:
        """Resume a session whose credentials ``session`` holds (e.g. ClientSession.resuming)."""
        self = cls(url, session, api_key=api_key, options=options, listeners=listeners)
        self.timings.drops_ns.append(time.monotonic_ns())
        await self._resume(automatic=False)
        return self

    async def _connect_socket(self, timeout: float) -> WebSocket:
        """TCP (+ TLS) and the websocket upgrade; OpenFailed naming what went wrong."""
        opts = self.options
        timeout = min(timeout, opts.open_timeout_s)
        connected = False

        def on_connected() -> None:
            nonlocal connected
            connected = True

        secure = self.url.startswith("wss://")
        tls = (opts.tls or process_tls()).context() if secure else None
        try:
            return await asyncio.wait_for(
                open_websocket(
                    self.url,
                    headers=self._headers,
                    user_agent="duplexctl",
                    max_size=opts.max_size,
                    ssl=tls,
                    on_connected=on_connected,
                ),
                timeout,
            )
        except InvalidURI:
            raise BadInput(f"not a websocket URL: {self.given_url}") from None
        except (TimeoutError, OSError, WebSocketException) as exc:
            failure = failures.classify(
                exc, self.url, where=self._where(), connected=connected, timeout_s=timeout
            )
            raise OpenFailed(failure.message, cause=failure.cause) from None

    def _where(self) -> str:
        return self.given_url

    async def _open(self, update: dict[str, Any], timeout: float) -> None:
        t = self.timings
        deadline = time.monotonic() + timeout
        t.t_connect_start_ns = time.monotonic_ns()
        ws = await self._connect_socket(timeout)
        t.t_open_ns = time.monotonic_ns()
        t.connect_ms = _ms(t.t_connect_start_ns, t.t_open_ns)
        self._ws = ws
        self.session.begin_connection()
        frames = 0
        try:
            ws.send(codec.dumps(update))
            t.t_update_sent_ns = self._last_send_ns = time.monotonic_ns()
            while True:
                happenings = await self._recv_handshake(ws, deadline)
                frames += 1
                for h in happenings:
                    answer = open_answer(h)
                    if answer is OpenAnswer.CREATED:
                        t.t_created_ns = h.recv_ns
                        t.handshake_ms = _ms(t.t_update_sent_ns, h.recv_ns)
                        self._start_tasks(ws)
                        return
                    if answer is OpenAnswer.REFUSED:
                        assert isinstance(h, ErrorReceived)
                        self._raise_open_error(h)
                    if answer is OpenAnswer.GARBAGE:
                        assert isinstance(h, ViolationRecorded)
                        raise OpenFailed(
                            f"{self._where()}: the server sent {_frame_words(h)} instead of "
                            "session.created",
                            cause=Cause.GARBAGE,
                            connect_ms=t.connect_ms,
                        )
        except TimeoutError:
            seen = f" ({frames} other frame(s) received)" if frames else ""
            raise OpenFailed(
                f"{self._where()}: the server accepted the websocket but sent no "
                f"session.created within {timeout:g} s{seen}",
                cause=Cause.HANDSHAKE_TIMEOUT,
                connect_ms=t.connect_ms,
            ) from None
        except ConnectionClosed:
            when = "right after the websocket upgrade" if not frames else "before session.created"
            raise OpenFailed(
                f"{self._where()}: the server closed the connection {when} ({_how_closed(ws)})",
                cause=Cause.CLOSED_AFTER_UPGRADE,
                connect_ms=t.connect_ms,
            ) from None

    def _raise_open_error(self, h: ErrorReceived) -> None:
        err, t = h.error, self.timings
        reject_ms = _ms(t.t_update_sent_ns, h.recv_ns)
        if err.is_capacity:
            limit = err.advertised_limit
            raise AdmissionRejected(
                f"{self._where()} is full: {err.code}"
                + (f" (limit {limit} sessions)" if limit is not None else f": {err.message}"),
                cause=Cause.REJECTED_CAPACITY,
                error=err,
                connect_ms=t.connect_ms,
                time_to_reject_ms=reject_ms,
            )
        raise HandshakeFailed(
            f"{self._where()} refused the session: {err.code}: {err.message}",
            cause=Cause.REJECTED_OTHER,
            error=err,
            connect_ms=t.connect_ms,
            time_to_reject_ms=reject_ms,
        )

    async def _recv_handshake(self, ws: WebSocket, deadline: float) -> list[Happening]:
        """One frame during a handshake (open or resume), dispatched like any other."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        async with asyncio.timeout(remaining):
            raw, recv_ns = await ws.recv_timed()
        return self._digest(raw, recv_ns)

    # -- receiving -------------------------------------------------------------------------

    def _digest(self, raw: Message, recv_ns: int) -> list[Happening]:
        happenings = self.session.on_message(raw, recv_ns)  # never raises
        if self._violations:
            happenings += [
                ViolationRecorded(type="client.violation", recv_ns=recv_ns, seq=v.seq, violation=v)
                for v in self._violations
            ]
            self._violations.clear()
        for h in happenings:
            self._dispatch(h)
        return happenings

    def _dispatch(self, h: Happening) -> None:
        if isinstance(h, HeartbeatAck) and self._heartbeats_sent:
            sent = self._heartbeats_sent.pop(0)
            self.timings.heartbeat_rtts_ms.append((h.recv_ns - sent) / 1e6)
        elif isinstance(h, SessionClosed):
            self.timings.t_closed_ns = h.recv_ns
            self._closed_event.set()
        self._emit_local(h)

    def add_listener(self, listener: Callable[[Happening], None]) -> None:
        """Call ``listener(happening)`` synchronously for every happening, at receive time.

        Keep it quick (it runs in the socket's receive path); exceptions are collected in
        ``listener_errors`` rather than stopping it."""
        self._listeners.append(listener)

    def _start_tasks(self, ws: WebSocket) -> None:
        """The session is open on ``ws``: read it at receive time (no reader task: the
        socket calls :meth:`_on_message` from ``data_received``), keep the journal trimmed."""
        ws.on_close = self._on_close
        ws.deliver(self._on_message)
        if ws.closed:  # it went away while the handshake's leftovers were read
            self._on_close(ws)
        if self._maintenance is None or self._maintenance.done():
            self._maintenance = asyncio.create_task(self._maintain(), name="duplex-maintenance")

    def _on_message(self, raw: Message, recv_ns: int) -> None:
        self._digest(raw, recv_ns)
        ws = self._ws
        if self._event_acks is not None and ws is not None:
            self._send_ack(ws, recv_ns / 1e9)

    def _on_close(self, ws: WebSocket) -> None:
        if self._ws is ws:
            self._ws = None
        lost = ws.protocol.close_rcvd is None  # no close frame: 1006
        self._on_socket_gone(
            ws.close_code, ws.close_reason or ("connection lost" if lost else "closed")
        )

    def _on_socket_gone(self, code: int | None, reason: str) -> None:
        """Decide what a lost socket means: expected end, fault injection, or resume."""
        closing = self.attachment in (Attachment.CLOSING, Attachment.RELEASED)
        if closing or self.session.ended or self.session.replaced:
            self._end_stream()
            return
        now = time.monotonic_ns()
        if self.attachment is Attachment.HELD:
            return  # drop(): the caller decides when to resume
        self.timings.drops_ns.append(now)
        resuming = self.options.auto_resume and self.session.can_resume
        self._emit_local(
            ConnectionLost(
                type="connection.lost", recv_ns=now, code=code, reason=reason, resuming=resuming
            )
        )
        if resuming:
            self._resume_task = asyncio.create_task(self._resume(automatic=True))
            self._resume_task.add_done_callback(self._after_auto_resume)
        else:
            self._end_stream()

    def _after_auto_resume(self, task: asyncio.Task[ResumeRecord]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        now = time.monotonic_ns()
        self._emit_local(
            ConnectionLost(
                type="connection.lost",
                recv_ns=now,
                code=None,
                reason=str(task.exception()),
                resuming=False,
            )
        )
        self._end_stream()

    def _emit_local(self, h: Happening) -> None:
        for listener in self._listeners:
            try:
                listener(h)
            except Exception as exc:  # a broken listener must not stop receiving
                self.listener_errors.append(exc)
        if self.options.queue_happenings:
            self._queue.put_nowait(h)

    def _end_stream(self) -> None:
        if not self._ended:
            self._ended = True
            self._queue.put_nowait(_END)

    async def next(self, timeout: float | None = None) -> Happening | None:
        """The next happening; None once the stream has ended (closed, expired, lost).
        Raises TimeoutError after ``timeout`` seconds without one."""
        async with asyncio.timeout(timeout):
            item = await self._queue.get()
        if item is _END:
            self._queue.put_nowait(_END)  # keep answering None
            return None
        return item  # type: ignore[no-any-return]

    async def __aiter__(self) -> AsyncIterator[Happening]:
        while (h := await self.next()) is not None:
            yield h

    async def wait_for(self, predicate: Callable[[Happening], bool], timeout: float) -> Happening:
        """Consume happenings until one satisfies ``predicate`` (TimeoutError otherwise;
        ConnectionLostError if the stream ends first). Listeners still see everything."""
        async with asyncio.timeout(timeout):
            while True:
                h = await self.next()
                if h is None:
                    raise ConnectionLostError("the session ended before the awaited event")
                if predicate(h):
                    return h

    # -- sending ---------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._ws is not None

    async def _live_socket(self) -> WebSocket:
        if self._ws is None and self._resume_task is not None and not self._resume_task.done():
            with contextlib.suppress(ResumeFailed):
                await asyncio.shield(self._resume_task)
        if self._ws is None:
            raise ConnectionLostError(f"not connected to {self._where()}")
        return self._ws

    async def send(self, event: dict[str, Any]) -> int:
        """Send one client event; returns monotonic ns right after the send returned.

        While an automatic resume is running the send waits for it and goes out on the new
        socket; with no socket and no resume it raises ConnectionLostError.
        """
        now = await self.send_text(codec.dumps(event))
        if event.get("type") == "session.heartbeat":
            self._heartbeats_sent.append(now)
        return now

    async def send_text(self, text: str) -> int:
        """Send one client event already encoded as JSON text (see :meth:`send`).

        With the socket up this is one synchronous write (plus a drain only when the
        transport asks to pause): the resume wait is only entered when there is no socket,
        so the hot path (hundreds of sessions appending 10 times a second) stays cheap.
        """
        for _ in range(2):
            ws = self._ws
            if ws is None:
                ws = await self._live_socket()  # waits for a running resume, or raises
            try:
                ws.send(text)
            except ConnectionClosed:
                # The socket's loss may start a resume; give it the chance, then retry once.
                await self._socket_gone(ws)
                continue
            now = time.monotonic_ns()
            self._last_send_ns = now
            if ws.paused:
                await self._drain(ws)
            return now
        raise ConnectionLostError(f"connection to {self._where()} lost while sending")

    async def _drain(self, ws: WebSocket) -> None:
        """Wait (at most ``drain_timeout_s``) until the server reads what was sent; a server
        that stops reading costs the socket, not the client's run: it is dropped, and the
        loss is handled like any other (a resume)."""
        try:
            async with asyncio.timeout(self.options.drain_timeout_s):
                await ws.drain()
        except TimeoutError:
            ws.abort()
            raise ConnectionLostError(
                f"{self._where()}: the server read nothing for {self.options.drain_timeout_s:g} s "
                "(the connection was dropped)"
            ) from None

    @staticmethod
    async def _socket_gone(ws: WebSocket) -> None:
        """Wait (bounded) until ``ws`` is gone and its loss was handled (resume started).
        ``asyncio.timeout``, not ``wait_for``: Python 3.11's ``wait_for`` swallows a
        cancellation that arrives as the socket closes, and the caller's task (replay's
        microphone, cancelled at the end of its run) then ran on for ever."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                await ws.wait_closed()

    async def heartbeat(self) -> int:
        return await self.send(self.session.heartbeat())

    async def ack_playback(
        self, response_id: str, played_ms: float, committed_ms: float | None = None
    ) -> int:
        """Send ``playback.ack`` (``played_ms`` from the playback clock, not from bytes)."""
        return await self.send(self.session.playback_ack(response_id, played_ms, committed_ms))

    def _send_ack(self, ws: WebSocket, now: float) -> None:
        """Send the ``session.event_ack`` the duty says is owed at ``now`` (s), if any."""
        duty = self._event_acks
        event = duty.due(now) if duty is not None else None
        if event is None:
            return
        try:
            ws.send(codec.dumps(event))
        except ConnectionClosed:
            duty.unsent()  # type: ignore[union-attr]
            return
        self._last_send_ns = time.monotonic_ns()

    async def _maintain(self) -> None:
        """Event acks (when this connection sends them) and idle heartbeats, for as long as
        the connection lives."""
        opts = self.options
        while self.attachment is not Attachment.RELEASED:
            await asyncio.sleep(opts.ack_interval_s)
            ws = self._ws
            if ws is None or self.attachment is Attachment.CLOSING or self.session.ended:
                continue
            self._send_ack(ws, time.monotonic())
            idle_s = (time.monotonic_ns() - self._last_send_ns) / 1e9
            if opts.heartbeat_s is not None and idle_s >= opts.heartbeat_s:
                with contextlib.suppress(ConnectionLostError):
                    await self.heartbeat()

    # -- faults and resume -----------------------------------------------------------------

    async def drop(self, *, auto_resume: bool = False) -> int:
        """Abort the TCP connection without a close frame; returns ``t_drop`` (ns).

        ``auto_resume=False`` (fault injection at an exact offset): stay disconnected until
        :meth:`resume`. ``auto_resume=True``: behave like an unexpected loss.
        """
        ws = self._ws
        if ws is None:
            raise ConnectionLostError("drop(): not connected")
        self._move(Move.LOSE if auto_resume else Move.DROP)
        t_drop = time.monotonic_ns()
        ws.abort()
        await self._socket_gone(ws)
        if not auto_resume:
            self.timings.drops_ns.append(t_drop)
        return t_drop

    async def resume(self) -> ResumeRecord:
        """Resume on a new socket (dropping the current one first if still connected)."""
        if self._resume_task is not None and not self._resume_task.done():
            return await asyncio.shield(self._resume_task)
        if self._ws is not None:
            await self.drop()
        return await self._resume(automatic=False)

    async def _resume(self, *, automatic: bool, attempts: int | None = None) -> ResumeRecord:
        opts = self.options
        t_drop = self.timings.drops_ns[-1] if self.timings.drops_ns else time.monotonic_ns()
        record = ResumeRecord(t_drop_ns=t_drop, automatic=automatic)
        self.timings.resumes.append(record)
        max_attempts = attempts if attempts is not None else opts.resume_attempts
        backoff = Backoff(opts.backoff_min_s, opts.backoff_max_s)
        last_problem = "no attempt made"
        while record.attempts < max_attempts:
            record.attempts += 1
            blocked = resume_blocked(self.session)
            if blocked is not None:
                record.outcome = blocked.outcome
                raise ResumeFailed("session cannot be resumed", record, fatal=True)
            try:
                answer = await self._resume_once(record)
            except OpenFailed as exc:
                answer = ResumeAnswer(exc.admission, fatal=False)
                last_problem = str(exc)
            else:
                if answer.resumed:
                    self._move(Move.RESUMED)
                    return record
                last_problem = f"{answer.outcome}" + (
                    f": {record.error.message}" if record.error is not None else ""
                )
            record.outcome = answer.outcome
            if answer.fatal:
                raise ResumeFailed(f"resume failed: {last_problem}", record, fatal=True)
            if record.attempts < max_attempts:
                await asyncio.sleep(backoff.delay())
        raise ResumeFailed(
            f"resume failed after {record.attempts} attempts: {last_problem}", record, fatal=False
        )

    async def _resume_once(self, record: ResumeRecord) -> ResumeAnswer:
        """One attempt: waits for the frame that answers it (:func:`resume_answer` decides)."""
        timeout = self.options.resume_timeout_s
        deadline = time.monotonic() + timeout
        ws = await self._connect_socket(timeout)
        record.reconnect_ms = _ms(record.t_drop_ns, time.monotonic_ns())
        self.session.begin_connection()
        event = self.session.resume()
        record.resumed_from_seq = self.session.last_seq
        try:
            ws.send(codec.dumps(event))
            t_sent = self._last_send_ns = time.monotonic_ns()
            while True:
                try:
                    happenings = await self._recv_handshake(ws, deadline)
                except TimeoutError:
                    return RESUME_TIMED_OUT
                for h in happenings:
                    answer = resume_answer(h)
                    if answer is None:
                        continue
                    if isinstance(h, ErrorReceived):
                        record.error = h.error
                    if answer.resumed:
                        record.outcome = answer.outcome
                        record.t_resumed_ns = h.recv_ns
                        record.resume_handshake_ms = _ms(t_sent, h.recv_ns)
                        record.resume_ms = _ms(record.t_drop_ns, h.recv_ns)
                        self._ws = ws
                        self._start_tasks(ws)
                        ws = None  # type: ignore[assignment]  # now the connection's socket
                    return answer
        except ConnectionClosed:  # at any point, even with the upgrade answer
            return RESUME_TRANSPORT_ERROR
        finally:
            if ws is not None:
                ws.abort()

    # -- closing ---------------------------------------------------------------------------

    async def close(self, reason: str = "client_close", timeout: float | None = None) -> None:
        """Send ``session.close``, wait for ``session.closed`` (``close_ms``), release
        everything. Idempotent; never raises for a connection that is already gone.

        Bounded: everything — a resume still running, one reattach of a dropped session,
        ``session.close`` → ``session.closed`` — within ``timeout`` (default
        ``close_timeout_s``), then the socket's close handshake within
        ``CLOSE_TCP_TIMEOUT_S``. A socket that ends after ``session.close`` went out ends the
        wait: nothing more can come on it."""
        if self.attachment is Attachment.RELEASED:
            return
        self._move(Move.CLOSE)
        wait_s = self.options.close_timeout_s if timeout is None else timeout
        try:
            async with asyncio.timeout(wait_s):
                await self._close_session(reason)
        except TimeoutError:
            pass
        finally:
            await self._release()

    async def _close_session(self, reason: str) -> None:
        if self._resume_task is not None and not self._resume_task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._resume_task)
        if self._ws is None and self.session.can_resume and not self.session.ended:
            # A dropped session holds its admission slot for the whole disconnect grace;
            # reattach once so the close frees it now.
            with contextlib.suppress(ResumeFailed):
                self.timings.drops_ns.append(time.monotonic_ns())
                await self._resume(automatic=False, attempts=1)
        ws = self._ws
        if ws is None or self.session.ended:
            return
        try:
            sent = await self.send(self.session.close(reason))
        except ConnectionLostError:
            return
        self.timings.t_close_sent_ns = sent
        closed = asyncio.ensure_future(self._closed_event.wait())
        gone = asyncio.ensure_future(ws.wait_closed())
        try:
            await asyncio.wait({closed, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            gone.cancel()
        self.timings.close_ms = _ms(sent, self.timings.t_closed_ns)

    def _move(self, move: Move) -> None:
        self.attachment = after(self.attachment, move)

    async def _release(self) -> None:
        self._move(Move.RELEASE)
        resuming = self._resume_task
        if resuming is not None and not resuming.done():  # past close's bound: given up
            await cancel_and_wait(resuming)
        await cancel_and_wait(self._maintenance)
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TCP_TIMEOUT_S):
                    await ws.close()
            ws.abort()
        self._ws = None
        self.session.checker.finish()
        self._end_stream()

    async def _abort_quietly(self) -> None:
        """Open failed or was cancelled: close a created session, else just drop the socket."""
        if self.session.created and not self.session.ended and self._ws is not None:
            if self._ws.on_message is None:
                self._start_tasks(self._ws)
            with contextlib.suppress(Exception):
                await asyncio.shield(self.close())
            return
        await self._release()

    async def __aenter__(self) -> DuplexConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # shield: a second Ctrl-C must not leave the server holding the session
        await asyncio.shield(self.close())


@contextlib.asynccontextmanager
async def connect(
    url: str,
    settings: SessionSettings,
    *,
    api_key: str | None = None,
    timeout: float = 30.0,
    options: ConnectionOptions | None = None,
    listeners: Iterable[Callable[[Happening], None]] = (),
) -> AsyncIterator[DuplexConnection]:
    """``async with connect(url, settings) as conn:`` — open, and close on every exit path."""
    conn = await DuplexConnection.open(
        url, settings, api_key=api_key, timeout=timeout, options=options, listeners=listeners
    )
    async with conn:
        yield conn


def _abandoned(exc: BaseException) -> bool:
    """An open given up by its caller (cancelled, interrupted, or the run stopping), not
    failed by the server: the handshake may still complete on the server's side."""
    return isinstance(exc, asyncio.CancelledError | KeyboardInterrupt) or (
        isinstance(exc, OpenFailed) and exc.gave_up
    )
