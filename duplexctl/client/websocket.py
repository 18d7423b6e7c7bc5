"""A lean client websocket: websockets' sans-I/O protocol on an asyncio transport.

Why not ``websockets.asyncio.client``: a ``load`` process sends ten appends per second for
each of hundreds of sessions, and issue 7 measures its CPU against a bare streamer. The
asyncio connection costs, per send, an async context manager, a timeout scope, a drain
coroutine and a fresh ``os.urandom`` mask, and per received message a queue hand-off to a
reader task that must be woken; together that was about a quarter of ``load``'s CPU. Here:

* :meth:`WebSocket.send` is **synchronous**: one masked frame built from a pooled random mask
  and written to the transport at once (the bytes leave before it returns, as with
  ``await ws.send``); :meth:`WebSocket.drain` waits only when the transport asks to pause.
* Received messages are handed to ``on_message(data, recv_ns)`` **inside**
  ``data_received`` — no reader task, no queue — with ``recv_ns`` taken the moment the bytes
  came off the socket. Until a callback is set (during a handshake) they queue for
  :meth:`WebSocket.recv`; :meth:`WebSocket.deliver` then flushes them, in order.
* The server's data, ping and pong frames are parsed here (:meth:`WebSocket._parse_fast`:
  a header, a length, a slice — the library's generator-based parser was a sixth of the
  receive path). The first frame that is anything else — a close frame, a masked frame,
  reserved bits or opcodes, a control frame over 125 bytes, a frame over ``max_size`` — and
  everything after it goes to websockets' parser, which judges it exactly as it would have.
* Everything else is websockets' own sans-I/O :class:`~websockets.client.ClientProtocol`:
  the HTTP upgrade and its checks, the close handshake, failing the connection, and its
  exception types (``InvalidURI``, ``InvalidStatus``, ``ConnectionClosed``), so callers
  handle errors exactly as with the library's client. It is fed the upgrade answer's head
  alone (a 101 has no body), so the fast parser starts exactly at the first frame.

Outgoing frames are never fragmented, which is what makes writing them directly next to the
protocol object safe (it keeps no state about outgoing data frames).
"""

from __future__ import annotations

import asyncio
import os
import ssl as ssl_module
import struct
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Final, cast

from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed, InvalidMessage
from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import CONNECTING, OPEN, State
from websockets.uri import parse_uri

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - websockets built without its C extension
    from websockets.utils import apply_mask

Message = str | bytes
OnMessage = Callable[[Message, int], None]

#: Masks are drawn from the OS's strong source, 4 KiB at a time (1024 frames per syscall).
MASK_POOL_BYTES: Final = 4096
#: After a close frame, how long to wait for the server to end the TCP connection.
CLOSE_TCP_TIMEOUT_S: Final = 2.0
#: The upgrade answer's head may not exceed this (websockets' own limits are far below).
MAX_HEAD_BYTES: Final = 65536
#: How much of a non-HTTP answer to the upgrade an error shows.
UPGRADE_SHOWN_BYTES: Final = 60
#: Frames the fast parser handles itself: continuation, text, binary, ping, pong.
_FAST_OPCODES: Final = frozenset({0x0, 0x1, 0x2, 0x9, 0xA})
#: Transport write buffer above which :meth:`WebSocket.drain` waits (same as websockets).
WRITE_LIMIT: Final = 2**15


_DATA_OPCODES: Final = frozenset({Opcode.CONT, Opcode.TEXT, Opcode.BINARY})


class UpgradeUnanswered(ConnectionError):
    """The server closed the connection before answering the upgrade with a single byte."""


def _resolve(future: asyncio.Future[None] | None) -> None:
    """Wake whoever waits on ``future`` (if anyone still does)."""
    if future is not None and not future.done():
        future.set_result(None)


class WebSocket(asyncio.Protocol):
    """One client websocket connection (see the module docstring)."""

    def __init__(self, protocol: ClientProtocol) -> None:
        self.protocol = protocol
        self.transport: asyncio.Transport | None = None
        self.on_message: OnMessage | None = None
        #: called once, after the connection is gone (``close_code`` is set by then)
        self.on_close: Callable[[WebSocket], None] | None = None
        self.close_code: int | None = None
        self.close_reason = ""
        self._loop = asyncio.get_running_loop()
        self._response: asyncio.Future[Response] = self._loop.create_future()
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._queued: deque[tuple[Message, int]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._fragments: list[bytes] = []
        self._fragment_text = False
        self._paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._close_timer: asyncio.TimerHandle | None = None
        self._masks = b""
        self._mask_at = MASK_POOL_BYTES
        self._max_size: int | None = protocol.max_message_size
        self._fast = False  # True once upgraded: frames are parsed by _parse_fast
        self._head = b""  # the upgrade answer, until its head is complete
        self._pending = b""  # a partial frame, fast mode

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(WRITE_LIMIT)

    def data_received(self, data: bytes) -> None:
        recv_ns = time.monotonic_ns()
        if self._fast:
            rest = self._parse_fast(data, recv_ns)
            if rest:
                self._receive_slow(rest, recv_ns)
            return
        if self.protocol.state is CONNECTING:
            self._upgrade_data(data, recv_ns)
            return
        self._receive_slow(data, recv_ns)

    def _upgrade_data(self, data: bytes, recv_ns: int) -> None:
        """Feed the protocol the upgrade answer's head only (a 101 has no body), so the
        frames after it start exactly where the fast parser takes over."""
        head = self._head = self._head + data
        end = head.find(b"\r\n\r\n")
        if end < 0 and len(head) <= MAX_HEAD_BYTES:
            return  # the head is not complete yet
        cut = len(head) if end < 0 else end + 4
        self._head = b""
        self._receive_slow(head[:cut], recv_ns)
        rest = head[cut:]
        if self.protocol.state is OPEN:
            self._fast = True
            if rest:
                rest = self._parse_fast(rest, recv_ns)
        if rest:
            self._receive_slow(rest, recv_ns)

    def _receive_slow(self, data: bytes, recv_ns: int) -> None:
        """websockets' own parser: the upgrade, close frames, and anything unusual."""
        protocol = self.protocol
        protocol.receive_data(data)
        events = protocol.events_received()
        self._write_pending()
        for event in events:
            if type(event) is Frame:
                self._frame(event, recv_ns)
            elif isinstance(event, Response) and not self._response.done():
                self._response.set_result(event)
        if protocol.close_expected():
            self._expect_tcp_close()

    def eof_received(self) -> None:
        self.protocol.receive_eof()
        self._write_pending()
        # returning None closes the transport

    def connection_lost(self, exc: Exception | None) -> None:
        protocol = self.protocol
        protocol.receive_eof()  # no-op when the EOF was already seen
        if self._close_timer is not None:
            self._close_timer.cancel()
        rcvd = protocol.close_rcvd
        self.close_code = rcvd.code if rcvd is not None else int(CloseCode.ABNORMAL_CLOSURE)
        self.close_reason = rcvd.reason if rcvd is not None else ""
        if not self._response.done():
            self._response.set_exception(self._upgrade_failure())
            self._response.exception()  # retrieved: nobody may be waiting any more
        self._wake()
        _resolve(self._drain_waiter)
        self._closed.set_result(None)
        if self.on_close is not None:
            self.on_close(self)

    def _upgrade_failure(self) -> Exception:
        """Why the upgrade ended without an answer, naming what the server did send: an
        incomplete head (the first bytes of something that is not HTTP), or nothing."""
        if self._head:
            return InvalidMessage(
                f"the answer to the upgrade is not HTTP: {self._head[:UPGRADE_SHOWN_BYTES]!r}"
            )
        if self.protocol.handshake_exc is not None and not isinstance(
            self.protocol.handshake_exc.__cause__, EOFError
        ):
            return self.protocol.handshake_exc
        return UpgradeUnanswered("the server closed the connection without answering the upgrade")

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        _resolve(self._drain_waiter)

    # -- receiving -------------------------------------------------------------------------

    def _parse_fast(self, data: bytes, recv_ns: int) -> bytes:
        """Parse the server's data, ping and pong frames here; return the bytes from the
        first frame that is not one of those (a close frame, or anything the protocol must
        judge: a masked frame, reserved bits or opcodes, an oversized or invalid control
        frame), which from then on all go to websockets' parser. A partial frame is kept."""
        buf = self._pending + data if self._pending else data
        n, pos = len(buf), 0
        max_size = self._max_size
        while n - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            opcode = b0 & 0x0F
            if b1 & 0x80 or b0 & 0x70 or opcode not in _FAST_OPCODES:
                return self._hand_over(buf[pos:])
            length, head = b1, 2
            if length == 126:
                if n - pos < 4:
                    break
                length, head = int.from_bytes(buf[pos + 2 : pos + 4], "big"), 4
            elif length == 127:
                if n - pos < 10:
                    break
                length, head = int.from_bytes(buf[pos + 2 : pos + 10], "big"), 10
            if (opcode >= 8 and (length > 125 or not b0 & 0x80)) or (
                max_size is not None and length > max_size
            ):
                return self._hand_over(buf[pos:])
            end = pos + head + length
            if end > n:
                break
            payload = buf[pos + head : end]
            pos = end
            if opcode == 1 or opcode == 2:
                if self._fragments:
                    return self._fail(CloseCode.PROTOCOL_ERROR, "expected a continuation frame")
                self._data_frame(opcode, b0 & 0x80, payload, recv_ns)
            elif opcode == 0:
                if not self._fragments:
                    return self._fail(CloseCode.PROTOCOL_ERROR, "unexpected continuation frame")
                if max_size is not None and sum(map(len, self._fragments)) + length > max_size:
                    return self._fail(CloseCode.MESSAGE_TOO_BIG, "message over max_size")
                self._data_frame(0, b0 & 0x80, payload, recv_ns)
            elif opcode == 9 and self.transport is not None:  # ping: answer it at once
                self.transport.write(self._client_frame(0x8A, payload))
            if not self._fast:  # a message failed the connection (invalid UTF-8)
                return b""
        self._pending = buf[pos:] if pos < n else b""
        return b""

    def _hand_over(self, rest: bytes) -> bytes:
        """Leave fast mode: ``rest`` (from a frame boundary on) is websockets' to parse."""
        self._fast, self._pending = False, b""
        return rest

    def _fail(self, code: CloseCode, reason: str) -> bytes:
        """Fail the connection (close frame with ``code``) and stop parsing."""
        self._fast, self._pending, self._fragments = False, b"", []
        self.protocol.fail(code, reason)
        self._write_pending()
        self._expect_tcp_close()
        return b""

    def _frame(self, frame: Frame, recv_ns: int) -> None:
        """A frame from websockets' parser (which already judged it)."""
        if frame.opcode in _DATA_OPCODES:
            self._data_frame(frame.opcode.value, frame.fin, bytes(frame.data), recv_ns)
        # ping, pong and close frames are the protocol's business

    def _data_frame(self, opcode: int, fin: int | bool, payload: bytes, recv_ns: int) -> None:
        """A text (1), binary (2) or continuation (0) frame, from either parser: whole
        messages are delivered, fragments collected (a stray continuation is ignored)."""
        if opcode:
            if fin:
                self._message(payload, opcode == 1, recv_ns)
            else:
                self._fragments = [payload]
                self._fragment_text = opcode == 1
        elif self._fragments:
            self._fragments.append(payload)
            if fin:
                message, self._fragments = b"".join(self._fragments), []
                self._message(message, self._fragment_text, recv_ns)

    def _message(self, data: bytes, text: bool, recv_ns: int) -> None:
        message: Message = data
        if text:
            try:
                message = data.decode()
            except UnicodeDecodeError:
                self._fail(CloseCode.INVALID_DATA, "invalid UTF-8 in a text frame")
                return
        if self.on_message is not None:
            self.on_message(message, recv_ns)
        else:
            self._queued.append((message, recv_ns))
            self._wake()

    def _wake(self) -> None:
        _resolve(self._waiter)

    async def recv(self) -> Message:
        """The next queued message (only before :meth:`deliver`); raises ConnectionClosed
        once the connection is gone and nothing is left."""
        return (await self.recv_timed())[0]

    async def recv_timed(self) -> tuple[Message, int]:
        """:meth:`recv` with the message's receive time (monotonic ns)."""
        while not self._queued:
            if self._closed.done():
                raise self._closed_error()
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._queued.popleft()

    def deliver(self, on_message: OnMessage) -> None:
        """From now on hand every message to ``on_message`` at receive time; messages that
        arrived before (queued for :meth:`recv`) go to it first, in order."""
        self.on_message = on_message
        while self._queued:
            on_message(*self._queued.popleft())

    # -- sending ---------------------------------------------------------------------------

    @property
    def open(self) -> bool:
        return self.protocol.state is OPEN and self.transport is not None

    def send(self, message: str) -> None:
        """Write one text message now; raises ConnectionClosed if the connection is not open."""
        transport = self.transport
        if self.protocol.state is not OPEN or transport is None or transport.is_closing():
            raise self._closed_error()
        transport.write(self._client_frame(0x81, message.encode()))

    def _client_frame(self, first_byte: int, payload: bytes) -> bytes:
        """One masked client frame: ``first_byte`` is FIN and the opcode (0x81: text)."""
        n = len(payload)
        if n < 126:
            header = bytes((first_byte, 0x80 | n))
        elif n < 65536:
            header = struct.pack("!BBH", first_byte, 0xFE, n)
        else:
            header = struct.pack("!BBQ", first_byte, 0xFF, n)
        at = self._mask_at
        if at >= MASK_POOL_BYTES:
            self._masks, at = os.urandom(MASK_POOL_BYTES), 0
        mask = self._masks[at : at + 4]
        self._mask_at = at + 4
        return header + mask + apply_mask(payload, mask)

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its limit (rare on loopback)."""
        if not self._paused or self._closed.done():
            return
        self._drain_waiter = self._loop.create_future()
        await self._drain_waiter

    @property
    def paused(self) -> bool:
        return self._paused

    def _write_pending(self) -> None:
        transport = self.transport
        if transport is None:
            return
        for data in self.protocol.data_to_send():
            if data:
                transport.write(data)
            elif transport.can_write_eof():
                transport.write_eof()

    def _closed_error(self) -> ConnectionClosed:
        protocol = self.protocol
        if protocol.state is State.CLOSED:
            return protocol.close_exc
        # closing (a close frame came with the upgrade answer, or the connection is being
        # failed): the library asserts this third argument is set exactly when both are
        rcvd, sent = protocol.close_rcvd, protocol.close_sent
        both = rcvd is not None and sent is not None
        return ConnectionClosed(rcvd, sent, protocol.close_rcvd_then_sent if both else None)

    # -- closing ---------------------------------------------------------------------------

    def _expect_tcp_close(self) -> None:
        """The close handshake is under way: the server should end TCP; if it does not
        within :data:`CLOSE_TCP_TIMEOUT_S`, end it here."""
        if self._close_timer is None and self.transport is not None:
            self._close_timer = self._loop.call_later(CLOSE_TCP_TIMEOUT_S, self.abort)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close handshake: send a close frame and wait until the connection is gone."""
        if self.protocol.state is OPEN:
            self.protocol.send_close(code, reason)
            self._write_pending()
            self._expect_tcp_close()
        await self.wait_closed()

    def abort(self) -> None:
        """End the TCP connection at once, without a close frame (fault injection)."""
        if self.transport is not None:
            self.transport.abort()

    async def wait_closed(self) -> None:
        """Return once the connection is gone (``on_close`` has run by then)."""
        await asyncio.shield(self._closed)

    @property
    def closed(self) -> bool:
        return self._closed.done()


async def open_websocket(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    user_agent: str | None = None,
    max_size: int | None = 2**20,
    ssl: ssl_module.SSLContext | None = None,
    on_connected: Callable[[], None] | None = None,
) -> WebSocket:
    """Open ``url`` (``ws://`` or ``wss://``) and complete the upgrade.

    Raises websockets' ``InvalidURI`` for a bad URL, ``InvalidStatus`` when the server
    refuses the upgrade (the HTTP status is on ``exc.response``), another
    ``InvalidHandshake`` for a bad upgrade answer, ``OSError`` when the socket cannot be
    opened (``ssl.SSLError`` for TLS). No timeout of its own: wrap it
    (``asyncio.wait_for``); ``on_connected`` is called once TCP (and TLS) are up and only the
    upgrade is left, so a timeout can say which part the server never did. The transport is
    closed on every failure.
    """
    wsuri = parse_uri(url)
    protocol = ClientProtocol(wsuri, max_size=max_size)
    loop = asyncio.get_running_loop()
    context: ssl_module.SSLContext | None = None
    if wsuri.secure:
        context = ssl if ssl is not None else ssl_module.create_default_context()
    ws = WebSocket(protocol)
    await loop.create_connection(
        lambda: cast(asyncio.Protocol, ws),
        wsuri.host,
        wsuri.port,
        ssl=context,
        server_hostname=wsuri.host if context is not None else None,
    )
    if on_connected is not None:
        on_connected()
    try:
        request = protocol.connect()
        if headers:
            request.headers.update(headers)
        if user_agent is not None:
            request.headers["User-Agent"] = user_agent
        protocol.send_request(request)
        ws._write_pending()
        await ws._response
        if protocol.handshake_exc is not None:
            raise protocol.handshake_exc
        # upgraded; the connection may already be closing (e.g. an oversized first message
        # in the same read): that is the session's business, not the upgrade's
    except BaseException:
        ws.abort()
        raise
    return ws
