"""One websocket connection: handshake, read loop, frame checks, and the ordered send queue.

Everything a client can get wrong *before* the engine sees an event is answered here, with
the codes, messages and (missing) ``event_id`` echoes of vLLM-Omni 0.30.0 (docs/protocol.md §1.3,
§1.4, wire/README.md ``bad_input``/``open_rejected``). These transport errors are written
straight to the socket, unsequenced, so — as on the real server — they may overtake session
events caused by earlier frames.

Sending goes through one writer task per connection draining a queue: the engine's ``emit``
is synchronous and can be called from anywhere, and the queue is what keeps the order of
frames exactly the order of calls. Handshake failures end the TCP connection without a close
frame (the client sees 1006), like the real server whose handler just returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from duplexctl.protocol import codec, ids
from duplexctl.protocol.errors import ProtocolError, flat_error, realtime_error
from duplexctl.protocol.names import CLIENT_EVENT_TYPES, Dialect, canonical_client, spell
from duplexctl.server.config import ServerConfig
from duplexctl.server.frames import Refusal, read_event
from duplexctl.server.registry import ManagedSession, Registry, ResumeGap

log = logging.getLogger(__name__)

DUPLEX_ON = frozenset({"1", "true", "on"})
AUTOSTART_OFF = frozenset({"0", "false", "no", "off"})
RESUME_ON = frozenset({"1", "true", "yes", "on"})
MAX_CLOSE_REASON_BYTES = 123
# Bound on waiting for queued bytes to reach the kernel before dropping the TCP connection.
_FLUSH_LIMIT_S = 1.0


@dataclass(frozen=True, slots=True)
class _Close:
    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class _Abort:
    pass


@dataclass(frozen=True, slots=True)
class _Marker:
    on_reached: Callable[[], None]
    on_failed: Callable[[], None]


_Item = bytes | _Close | _Abort | _Marker


class Connection:
    """The send side of one websocket: a queue and the task that drains it in order."""

    def __init__(self, ws: ServerConnection, config: ServerConfig) -> None:
        self.ws = ws
        self.dialect = config.dialect
        self.session: ManagedSession | None = None
        self.sent = 0
        self._accepting = True
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._backlog = 0  # bytes queued and not yet written
        self._max_backlog = config.max_send_backlog_bytes
        drop = config.fault("drop-after")
        self._drop_after = int(drop.value) if drop is not None and drop.value is not None else None
        self._writer = asyncio.create_task(self._write_loop(), name="duplexctl-writer")

    # -- the Attachment interface used by the registry -----------------------------------

    def send_event(self, event: dict[str, Any]) -> None:
        """Queue one unjournaled event (spelled for the server's dialect)."""
        etype = event.get("type")
        if isinstance(etype, str) and spell(etype, self.dialect) != etype:
            event = {**event, "type": spell(etype, self.dialect)}
        self.send_frame(codec.dumps_bytes(event))

    def send_frame(self, frame: bytes) -> None:
        """Queue one frame. A client that stops reading would make the queue grow for as
        long as its session produces output; past ``max_send_backlog_bytes`` the connection
        is dropped instead (the client sees 1006) and the session waits in its disconnect
        grace, journaling, as after any drop (docs/protocol.md §6.6)."""
        if not self._accepting:
            return
        self._backlog += len(frame)
        if self._backlog > self._max_backlog:
            log.warning("dropping a connection that is not reading: %d bytes queued", self._backlog)
            self.abort_now()
            return
        self._queue.put_nowait(frame)

    def after_delivery(self, on_reached: Callable[[], None], on_failed: Callable[[], None]) -> None:
        """Run ``on_reached`` once everything queued so far was written, else ``on_failed``."""
        if self._accepting:
            self._queue.put_nowait(_Marker(on_reached, on_failed))
        else:
            on_failed()

    def close(self, code: int, reason: str) -> None:
        """Close with a close frame after everything queued so far; nothing is sent after."""
        if self._accepting:
            self._accepting = False
            self._queue.put_nowait(_Close(code, _fit_close_reason(reason)))

    def abort(self) -> None:
        """End the TCP connection without a close frame after everything queued so far."""
        if self._accepting:
            self._accepting = False
            self._queue.put_nowait(_Abort())

    def abort_now(self) -> None:
        """Drop the TCP connection at once (receive timeout, a client that is not reading):
        the client sees 1006."""
        self.ws.transport.abort()
        self.abort()  # wakes the writer, which then stops

    # -- helpers ----------------------------------------------------------------------------

    def delivered(self) -> asyncio.Future[bool]:
        """A future that says whether everything queued so far reached the socket."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def settle(ok: bool) -> None:
            if not future.done():
                future.set_result(ok)

        self.after_delivery(lambda: settle(True), lambda: settle(False))
        return future

    @property
    def writing(self) -> bool:
        return not self._writer.done()

    async def finish(self, timeout_s: float) -> None:
        """Let the writer drain what is queued (bounded), then stop it."""
        self._accepting = False
        if not self._writer.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._writer), timeout_s)
        if not self._writer.done():
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer

    async def _write_loop(self) -> None:
        try:
            while True:
                item = await self._queue.get()
                if isinstance(item, bytes):
                    if self.ws.transport.is_closing():
                        # asyncio silently drops writes on a transport that is going away
                        # (e.g. the client's RST was already read): this frame is undelivered
                        return
                    await self.ws.send(item, text=True)
                    self._backlog -= len(item)
                    self.sent += 1
                    if self._drop_after is not None and self.sent >= self._drop_after:
                        await self._flush_and_abort()  # fault drop-after=N
                        return
                elif isinstance(item, _Marker):
                    item.on_reached()
                elif isinstance(item, _Close):
                    await self.ws.close(item.code, item.reason)
                    return
                else:
                    await self._flush_and_abort()
                    return
        except (ConnectionClosed, OSError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("writer failed")
            self.ws.transport.abort()
        finally:
            self._lost()

    async def _flush_and_abort(self) -> None:
        """Drop TCP without a close frame, but only after our bytes reached the kernel."""
        transport = self.ws.transport
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _FLUSH_LIMIT_S
        while transport.get_write_buffer_size() > 0 and loop.time() < deadline:
            await asyncio.sleep(0.005)
        transport.abort()

    def _lost(self) -> None:
        """The writer is done: fail what was waiting and detach from the session."""
        self._accepting = False
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, _Marker):
                item.on_failed()
        if self.session is not None:
            self.session.detach(self)


class ConnectionHandler:
    """Serves one websocket from handshake to disconnect."""

    def __init__(self, ws: ServerConnection, registry: Registry) -> None:
        self.ws = ws
        self.registry = registry
        self.config = registry.config
        self.conn = Connection(ws, registry.config)
        self.g1 = registry.config.dialect is Dialect.G1

    async def run(self) -> None:
        try:
            await self._run()
        except ConnectionClosed:
            # the client went away: detach now (not when the writer notices), so that
            # everything emitted from here on is only journaled
            if self.conn.session is not None:
                self.conn.session.detach(self.conn)
        finally:
            # anything not already ending with a close frame ends without one
            self.conn.abort()
            await self.conn.finish(timeout_s=15.0)

    async def _run(self) -> None:
        query = _query(self.ws)
        duplex = query.get("duplex")
        if duplex is not None and duplex.strip().lower() not in DUPLEX_ON:
            # route-level refusal (docs/protocol.md §1.6): flat shape, close 1000, empty reason
            self.conn.send_event(flat_error("unsupported", "Realtime API is not available"))
            self.conn.close(1000, "")
            return
        model = query.get("model") or None
        resume_only = (query.get("resume", "").strip().lower() in RESUME_ON) or (
            query.get("autostart", "").strip().lower() in AUTOSTART_OFF
        )
        pending: dict[str, Any] | None = None
        if model is not None and not resume_only:
            managed = await self._open({"model": model})
        else:
            try:
                async with asyncio.timeout(self.config.config_timeout_s):
                    raw = await self.ws.recv()
            except TimeoutError:
                self._handshake_error("config_timeout", "Timeout waiting for session.update")
                return
            first = read_event(raw, max_bytes=self.config.max_event_bytes, first=True)
            if isinstance(first, Refusal):
                self._handshake_error(first.code, first.message)
                return
            etype = first.get("type")
            if etype == "session.update":
                session = first.get("session")
                payload = dict(session) if isinstance(session, dict) else dict(first)
                payload.pop("type", None)
                managed = await self._open(payload)
            elif etype == "session.resume":
                managed = self._resume(first)
            else:
                # a command as first frame: a default session opens, then the command runs;
                # a transport-level rejection of it goes out before session.created, the
                # order vLLM-Omni produces (its pump sends session.created a moment later)
                rejected = False

                def precheck() -> None:
                    nonlocal rejected
                    rejected = self._reject_first_command(first)

                managed = await self._open(
                    {"model": model or self.config.served_model}, before_created=precheck
                )
                pending = None if rejected else first
        if managed is None:
            return
        if pending is not None:
            self._dispatch(managed, pending, pending["type"], _client_event_id(pending))
        await self._read_loop(managed)

    # -- handshake --------------------------------------------------------------------------

    def _handshake_error(self, code: str, message: str) -> None:
        """Answer the first frame / a resume with an error, then drop TCP (client sees 1006)."""
        event = flat_error(code, message) if self.g1 else realtime_error(code, message)
        self.conn.send_event(event)
        self.conn.abort()
        self.registry.log(f"session rejected: {code}: {message}")

    async def _open(
        self, session_obj: dict[str, Any], before_created: Callable[[], None] | None = None
    ) -> ManagedSession | None:
        """validate_open → admission → EngineSession → session.created → start()."""
        try:
            self.registry.engine.validate_open(session_obj)
        except ProtocolError as exc:
            self._handshake_error(exc.code, exc.message)
            return None
        except (TypeError, ValueError) as exc:
            self._handshake_error("invalid_session_config", str(exc))
            return None
        managed = self.registry.admit()
        if managed is None:
            limit = self.config.max_sessions
            if self.g1:
                self.conn.send_event(
                    flat_error(
                        "duplex_session_busy",
                        f"duplex session capacity reached (max_sessions={limit})",
                    )
                )
                self.conn.abort()
            else:
                self._handshake_error(
                    "resource_exhausted", f"duplex_session_capacity_exhausted: limit={limit}"
                )
            return None
        try:
            engine = self.registry.engine.create(managed.id, session_obj, managed.emit)
        except ProtocolError as exc:
            managed.finish()
            self._handshake_error(exc.code, exc.message)
            return None
        except Exception as exc:
            log.exception("engine session could not be created")
            managed.finish()
            self._handshake_error("engine_error", f"engine session could not be created: {exc}")
            return None
        managed.engine = engine
        managed.attach_first(self.conn)
        self.conn.session = managed
        if before_created is not None:
            before_created()
        try:
            created = {
                "type": "session.created",
                "event_id": ids.server_event_id(),
                "session": engine.session_object(),
                "attachment_generation": 1,
                "resume_token": managed.new_token(),
            }
        except Exception as exc:
            await self._open_failed(managed, exc)
            return None
        self.conn.send_event(created)
        if not await self.conn.delivered():
            # session.created never reached the client: without its id and token nobody can
            # ever resume it. Correct by default: end it now and free the slot. The fault
            # keeps vLLM-Omni's behaviour (a disconnect: the slot is held for the grace).
            if self.config.fault("leak-undelivered-created") is not None:
                engine.start()
                managed.detach(self.conn)
            else:
                await managed.abort()
            return None
        try:
            engine.start()
        except Exception as exc:
            await self._open_failed(managed, exc)
            return None
        managed.opened = True
        self.registry.log(f"session {managed.id} opened")
        return managed

    async def _open_failed(self, managed: ManagedSession, exc: Exception) -> None:
        """The engine broke while opening: never leak the slot, tell the client, drop TCP."""
        log.error("engine session %s failed to open: %r", managed.id, exc)
        self.conn.session = None
        await managed.abort()
        self._handshake_error("engine_error", f"engine session failed to open: {exc}")

    def _resume(self, event: dict[str, Any]) -> ManagedSession | None:
        session_id = event.get("session_id")
        token = event.get("resume_token")
        last = event.get("last_received_server_event_seq", 0)
        if (
            not isinstance(session_id, str)
            or not session_id
            or not isinstance(token, str)
            or not token
            or not isinstance(last, int)  # a JSON true passes as 1, as on vLLM-Omni
            or last < 0
        ):
            self._handshake_error(
                "invalid_session_resume",
                "session.resume requires session_id, resume_token, and a non-negative event "
                "sequence",
            )
            return None
        managed = self.registry.get(session_id)
        try:
            if managed is None:
                raise ProtocolError(
                    "session_resume_expired", f"Unknown or expired duplex session: {session_id}"
                )
            self.conn.session = managed
            managed.resume(self.conn, token, last)
        except ProtocolError as exc:
            self.conn.session = None
            self._handshake_error(exc.code, exc.message)
            return None
        except ResumeGap:
            self.conn.session = None
            self.conn.send_event(
                {
                    "type": "session.resync_required",
                    "event_id": ids.server_event_id(),
                    "session_id": session_id,
                    "reason": "journal_gap",
                }
            )
            self.conn.abort()
            return None
        return managed

    # -- after the handshake ----------------------------------------------------------------

    def _reject_first_command(self, event: dict[str, Any]) -> bool:
        """Transport-level checks of a first frame that is a command; True if rejected."""
        etype = event.get("type")
        client_id = _client_event_id(event)
        if not isinstance(etype, str):
            self._error("bad_event", "Duplex event missing string type", client_id)
            return True
        if not _known_command(etype):
            self._error("unknown_event", f"Unknown duplex event type: {etype}", client_id)
            return True
        return False

    async def _read_loop(self, managed: ManagedSession) -> None:
        limit = self.config.max_event_bytes
        while not managed.finished:
            engine = managed.engine
            timeout = engine.receive_timeout_s if engine is not None else None
            try:
                async with asyncio.timeout(timeout if timeout and timeout > 0 else None):
                    raw = await self.ws.recv()
            except TimeoutError:
                # silence for the session's receive timeout: a disconnect, no event, no close
                # frame (docs/protocol.md §6.8); the session goes into its grace
                self.conn.abort_now()
                managed.detach(self.conn)
                return
            if managed.attachment is not self.conn:
                return  # taken over by a resume on another socket
            event = read_event(raw, max_bytes=limit)
            if isinstance(event, Refusal):
                self._error(event.code, event.message)
                continue
            etype = event["type"]
            client_id = _client_event_id(event)
            if etype == "session.event_ack":
                try:
                    managed.journal.acknowledge(event.get("server_event_seq"))
                except ValueError as exc:
                    self._error("invalid_event_ack", str(exc), client_id)
                continue
            if etype == "session.resume":
                self._error(
                    "unsupported_session_resume",
                    "session.resume must be the first message of a new connection",
                    client_id,
                )
                continue
            self._dispatch(managed, event, etype, client_id)

    def _dispatch(
        self, managed: ManagedSession, event: dict[str, Any], etype: str, client_id: str | None
    ) -> None:
        """Hand one well-formed command to the engine; translator errors go out at once."""
        if not _known_command(etype):
            self._error("unknown_event", f"Unknown duplex event type: {etype}", client_id)
            return
        canonical = canonical_client(etype)
        if canonical != etype:
            event = {**event, "type": canonical}
            if etype == "input.commit" and not {"response_create", "create_response"} & set(event):
                # the alias answers the turn by default (docs/protocol.md §3.2); the canonical
                # commit does not, so the default must be made explicit before renaming
                event["response_create"] = True
        engine = managed.engine
        if engine is None or managed.finished:
            return
        try:
            engine.receive(event)
        except ProtocolError as exc:
            self.conn.send_event(exc.to_event(client_id))
        except Exception as exc:
            # the engine crashed on this event: vLLM-Omni closes the session with
            # transport_error and tells the client realtime_input_failed
            log.exception("engine failed on %s", canonical)
            self._error("realtime_input_failed", str(exc))
            self.registry.spawn(managed.close("transport_error"))

    def _error(self, code: str, message: str, client_id: str | None = None) -> None:
        self.conn.send_event(realtime_error(code, message, client_event_id=client_id))


def _fit_close_reason(reason: str) -> str:
    """A close frame's reason is at most 123 bytes of UTF-8 (RFC 6455 §5.5). The reason is
    the client's own ``session.close`` reason (session.closed carries it whole); a longer one
    is cut at a character boundary. Sent as it was, the writer failed and the client got no
    close frame; vLLM-Omni 0.30.0 leaves that connection open without one."""
    data = reason.encode()
    if len(data) <= MAX_CLOSE_REASON_BYTES:
        return reason
    return data[:MAX_CLOSE_REASON_BYTES].decode(errors="ignore")


def _known_command(etype: str) -> bool:
    """A client event type the engine understands (envelope events never reach it)."""
    canonical = canonical_client(etype)
    return canonical in CLIENT_EVENT_TYPES and canonical not in (
        "session.event_ack",
        "session.resume",
    )


def _client_event_id(event: dict[str, Any]) -> str | None:
    value = event.get("event_id")
    return value if isinstance(value, str) else None


def _query(ws: ServerConnection) -> dict[str, str]:
    """The request's query parameters (first value of each)."""
    request = ws.request
    if request is None:  # pragma: no cover - the handler only runs after the handshake
        return {}
    parsed = parse_qs(urlsplit(request.path).query, keep_blank_values=True)
    return {key: values[0] for key, values in parsed.items()}


async def handle(ws: ServerConnection, registry: Registry) -> None:
    """The websockets handler for ``/v1/realtime`` and ``/v1/duplex``."""
    await ConnectionHandler(ws, registry).run()
