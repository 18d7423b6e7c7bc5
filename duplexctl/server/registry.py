"""Sessions held by the server: admission, attachments, resume/takeover, grace and reaper.

The registry is the only owner of admission slots, journals and resume credentials; the
engine (session.py) only ever sees its ``emit`` callback. Every decision that must be atomic
(reserving a slot, validating and rotating a token, swapping the attached socket, queueing the
replay) is synchronous, so concurrent connections on one event loop can never interleave in
the middle of one — which is what keeps admission exact under a burst of opens and a replay
free of gaps and duplicates (nothing can be emitted between the replay and the first live
event).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from duplexctl.protocol import codec, ids
from duplexctl.protocol.errors import ProtocolError
from duplexctl.protocol.names import spell
from duplexctl.server.config import ServerConfig
from duplexctl.server.journal import Journal, JournalConflictError, JournalEntry, JournalGapError
from duplexctl.terminal import visible

log = logging.getLogger(__name__)

Emit = Callable[[dict[str, Any]], None]
#: Told one line per session opened, resumed, closed or rejected (``serve``'s session log).
SessionLog = Callable[[str], None]

# Events after which the engine session is gone: the slot is free once one was emitted.
TERMINAL_EVENTS = frozenset({"session.closed", "session.expired"})


class EngineLike(Protocol):
    """The engine side of the contract in docs/architecture.md, as the transport uses it."""

    id: str
    capabilities: dict[str, Any]
    receive_timeout_s: float

    # read-only: the transport only reads them; the engine keeps them (session.EngineSession
    # exposes them as properties over its context)
    @property
    def last_activity(self) -> float: ...
    @property
    def closed(self) -> bool: ...

    def session_object(self) -> dict[str, Any]: ...
    def start(self) -> None: ...
    def receive(self, event: dict[str, Any]) -> None: ...
    async def close(self, reason: str) -> None: ...
    async def expire(self, reason: str) -> None: ...
    async def abort(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Engine:
    """How the transport validates and creates engine sessions (B's module, or a test double)."""

    validate_open: Callable[[dict[str, Any] | None], None]
    create: Callable[[str, dict[str, Any] | None, Emit], EngineLike]
    #: the simulated GPU the sessions share (``server/metrics.py`` reads it); None for doubles
    gpu: Any = None


def default_engine(config: ServerConfig) -> Engine:
    """Bind the real session engine (imported lazily: the transport does not need it to load)."""
    from duplexctl.server import model, session

    gpu = model.SimulatedGpu(config)

    def create(session_id: str, session_obj: dict[str, Any] | None, emit: Emit) -> EngineLike:
        return session.EngineSession(
            session_id=session_id, session_obj=session_obj, config=config, gpu=gpu, emit=emit
        )

    return Engine(
        validate_open=lambda obj: session.validate_open(obj, config), create=create, gpu=gpu
    )


class Attachment(Protocol):
    """What a session needs from the socket it is attached to (handler.Connection)."""

    def send_event(self, event: dict[str, Any]) -> None: ...
    def send_frame(self, frame: bytes) -> None: ...
    def after_delivery(
        self, on_reached: Callable[[], None], on_failed: Callable[[], None]
    ) -> None: ...
    def close(self, code: int, reason: str) -> None: ...


class ResumeGap(Exception):
    """Replay impossible: the handler answers ``session.resync_required{journal_gap}``."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class ManagedSession:
    """One open session as the transport sees it: engine, journal, credential, attachment."""

    def __init__(self, registry: Registry, session_id: str) -> None:
        self.registry = registry
        self.id = session_id
        config = registry.config
        self.journal = Journal(
            max_bytes=config.resume_replay_max_bytes,
            ttl_s=config.resume_replay_ttl_s,
            clock=registry.clock,
        )
        self.engine: EngineLike | None = None
        self.attachment: Attachment | None = None
        self.generation = 0
        self.detached_at: float | None = None
        self.attached_at = registry.clock()
        self.finished = False
        self.ending = False  # an expire/close driven by the transport is in flight
        self.opened = False  # session.created reached the client and the engine started
        self._token_digest = b""
        self._recovery_digest: bytes | None = None

    # -- credentials ----------------------------------------------------------------------

    def new_token(self) -> str:
        token = ids.resume_token()
        self._token_digest = _digest(token)
        return token

    def _accept_token(self, token: str) -> bytes:
        """The digest of the accepted token, or raise ``invalid_resume_token``."""
        digest = _digest(token)
        if hmac.compare_digest(digest, self._token_digest):
            return digest
        recovery = self._recovery_digest
        if (
            self.attachment is None
            and recovery is not None
            and hmac.compare_digest(digest, recovery)
        ):
            return digest
        raise ProtocolError("invalid_resume_token", "Invalid duplex session resume token")

    # -- the engine's emit ----------------------------------------------------------------

    def emit(self, event: dict[str, Any]) -> None:
        """Stamp, journal and forward one engine event (synchronous: order is kept)."""
        if self.finished:
            return
        etype = event.get("type")
        wire = event
        spelled = spell(etype, self.registry.config.dialect) if isinstance(etype, str) else etype
        if spelled != etype:
            wire = {**event, "type": spelled}
        was_overflowed = self.journal.overflowed
        entry = self.journal.record(wire)
        if entry is None and not was_overflowed and self.attachment is not None:
            self.attachment.send_event(
                {
                    "type": "session.resync_required",
                    "event_id": ids.server_event_id(),
                    "session_id": self.id,
                    "reason": "journal_overflow",
                }
            )
        if self.attachment is not None:
            frame = entry.frame if entry is not None else _encode(wire)
            self.attachment.send_frame(frame)
        if etype in TERMINAL_EVENTS:
            reason = event.get("reason")
            self.finish(close_reason=reason if isinstance(reason, str) else str(etype))

    def finish(self, close_reason: str | None = None) -> None:
        """The session is over: free the slot, drop journal and credential, close the socket."""
        if self.finished:
            return
        self.finished = True
        attachment, self.attachment = self.attachment, None
        if attachment is not None and close_reason is not None:
            attachment.close(1000, close_reason)
        self.registry._remove(self)
        if self.opened:
            self.registry.log(f"session {self.id} closed: {close_reason or 'ended'}")

    # -- attachments ----------------------------------------------------------------------

    def attach_first(self, conn: Attachment) -> None:
        self.generation = 1
        self.attachment = conn
        self.detached_at = None
        self.attached_at = self.registry.clock()

    def detach(self, conn: Attachment) -> None:
        """``conn`` is gone (drop, abort, receive timeout, failed send): start the grace."""
        if self.finished or self.attachment is not conn:
            return
        self.attachment = None
        self.detached_at = self.registry.clock()
        engine = self.engine
        if engine is not None and not engine.capabilities.get("supports_session_resume", True):
            self.registry.spawn(self._end("close", "disconnect"))

    def resume(self, conn: Attachment, token: str, last_seq: int) -> None:
        """Checks 2-5 of docs/protocol.md §6.6, then activation; raises ProtocolError / ResumeGap.

        Every check happens before anything changes, so a refused attempt leaves the session
        and its token as they were.
        """
        engine = self.engine
        if self.finished or engine is None or engine.closed:
            raise _expired(self.id)
        if not engine.capabilities.get("supports_session_resume", True):
            raise ProtocolError(
                "unsupported_session_resume", f"Session does not support resume: {self.id}"
            )
        accepted = self._accept_token(token)
        try:
            replay: list[JournalEntry] = self.journal.replay_after(last_seq)
        except JournalGapError as exc:
            raise ResumeGap(str(exc)) from None
        except JournalConflictError as exc:
            raise ProtocolError("session_resume_conflict", str(exc)) from None
        # -- activation (synchronous from here: no event can slip between replay and live)
        token_out = self.new_token()
        self._recovery_digest = None
        old, old_generation = self.attachment, self.generation
        self.generation += 1
        generation = self.generation
        self.attachment = conn
        self.detached_at = None
        self.attached_at = self.registry.clock()
        conn.send_event(
            {
                "type": "session.resumed",
                "event_id": ids.server_event_id(),
                "session_id": self.id,
                "session": engine.session_object(),
                "attachment_generation": generation,
                "resume_token": token_out,
            }
        )
        for entry in replay:
            conn.send_frame(entry.frame)
        conn.after_delivery(
            lambda: None, lambda: self._activation_failed(conn, generation, accepted)
        )
        self.registry.log(f"session {self.id} resumed (attachment {generation})")
        if old is not None:
            old.send_event(
                {
                    "type": "session.replaced",
                    "event_id": ids.server_event_id(),
                    "session_id": self.id,
                    "attachment_generation": old_generation,
                }
            )
            old.close(1000, "session_replaced")

    def _activation_failed(self, conn: Attachment, generation: int, accepted: bytes) -> None:
        """Activation/replay never reached the client: the presented token works once more."""
        if self.finished or self.generation != generation:
            return
        if self.attachment is conn:
            self.detach(conn)
        if self.attachment is None:
            self._recovery_digest = accepted

    # -- endings driven by the transport --------------------------------------------------

    async def _end(self, how: str, reason: str = "") -> None:
        """Close/expire/abort the engine session, then make sure the slot is free."""
        if self.ending or self.finished:
            return
        self.ending = True
        engine = self.engine
        try:
            if engine is not None:
                if how == "expire":
                    await engine.expire(reason)
                elif how == "close":
                    await engine.close(reason)
                else:
                    await engine.abort()
        except Exception:
            log.exception("session %s: %s failed", self.id, how)
        finally:
            # the engine emits session.closed/expired (which already finished us); after an
            # abort, or an engine that failed, the slot must not leak either
            self.finish(close_reason=reason or None)

    async def close(self, reason: str) -> None:
        await self._end("close", reason)

    async def expire(self, reason: str) -> None:
        await self._end("expire", reason)

    async def abort(self) -> None:
        await self._end("abort")


def _expired(session_id: str) -> ProtocolError:
    return ProtocolError(
        "session_resume_expired", f"Unknown or expired duplex session: {session_id}"
    )


def _encode(event: dict[str, Any]) -> bytes:
    return codec.dumps_bytes(event)


class Registry:
    """All sessions of one server, its admission slots and its reaper."""

    def __init__(
        self,
        config: ServerConfig,
        engine: Engine,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.engine = engine
        self.clock = clock
        self._sessions: dict[str, ManagedSession] = {}
        self._slots_held = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reaper: asyncio.Task[None] | None = None
        #: opens refused because every admission slot was held (``/metrics``)
        self.rejected = 0
        self.session_log: SessionLog | None = None

    def log(self, what: str) -> None:
        """One line of the session log, with the slots held after it (no log: nothing)."""
        if self.session_log is not None:
            held = f"{self._slots_held} of {self.config.max_sessions} slots held"
            # a rejection can quote the client's own text: no control character reaches the
            # terminal, and one line stays one line
            shown = visible(what)
            if len(shown) > 200:
                shown = shown[:199] + "..."
            self.session_log(f"{shown} ({held})")

    # -- admission ------------------------------------------------------------------------

    @property
    def slots_held(self) -> int:
        """Sessions holding an admission slot (open, in grace or tearing down)."""
        return self._slots_held

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str) -> ManagedSession | None:
        return self._sessions.get(session_id)

    def sessions(self) -> list[ManagedSession]:
        return list(self._sessions.values())

    def admit(self) -> ManagedSession | None:
        """Reserve a slot and a session id at once (synchronous: exact under bursts)."""
        if self._slots_held >= self.config.max_sessions:
            self.rejected += 1
            return None
        self._slots_held += 1
        managed = ManagedSession(self, ids.session_id())
        self._sessions[managed.id] = managed
        return managed

    def _remove(self, managed: ManagedSession) -> None:
        if self._sessions.pop(managed.id, None) is managed:
            self._slots_held -= 1

    # -- background work ------------------------------------------------------------------

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        """Run ``coro`` in the background, keeping a reference until it ends."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def start_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap_forever(), name="duplexctl-reaper")

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.reaper_interval_s)
            try:
                self.reap()
            except Exception:  # one bad session must not stop expiry for all others
                log.exception("reaper tick failed")

    def reap(self) -> None:
        """One reaper tick: disconnect grace and idle TTL (docs/protocol.md §6.6, §6.8)."""
        now = self.clock()
        idle_ttl = self.config.idle_ttl_s
        for managed in list(self._sessions.values()):
            engine = managed.engine
            if managed.ending or managed.finished or engine is None:
                continue
            if (
                managed.attachment is None
                and managed.detached_at is not None
                and now - managed.detached_at >= self.config.disconnect_grace_s
            ):
                self.spawn(managed.expire("disconnect_grace_expired"))
            elif idle_ttl is not None:
                last = max(engine.last_activity, managed.attached_at)
                if now - last >= idle_ttl:
                    self.spawn(managed.expire("idle_ttl_expired"))

    async def shutdown(self, timeout_s: float = 5.0) -> None:
        """Close every session (attached ones see ``session.closed``), then stop the reaper."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        sessions = [m for m in self._sessions.values() if m.engine is not None]
        if sessions:
            closing = [asyncio.ensure_future(m.close("shutdown")) for m in sessions]
            _, pending = await asyncio.wait(closing, timeout=timeout_s)
            for task in pending:
                task.cancel()
        for managed in list(self._sessions.values()):
            managed.finish()
        if self._tasks:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
