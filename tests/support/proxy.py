"""A loopback TCP proxy that cuts a websocket connection at a chosen client frame (issue 31.4):
what the network does to a frame in flight when a connection drops.

It forwards bytes both ways and reads the client's frames as they pass (masked text frames;
only their ``type`` is looked at). Armed with :meth:`CuttingProxy.cut_at`, at the first
client frame matching ``when`` it either swallows the frame then cuts (the frame never
reaches the server: "a commit written into a connection that was already gone") or forwards
it then cuts ("it reached the server, then the drop"); ``lose_from`` also swallows every
client frame from an earlier one on (the audio of a turn lost with its commit). A cut is an
RST on both sides, as a dead path looks to both ends. One arming, one cut; later
connections (the resume) pass untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

Match = Callable[[dict[str, Any]], bool]


def of_type(etype: str, **fields: Any) -> Match:
    """A frame of this ``type`` (and these field values)."""
    return lambda f: f.get("type") == etype and all(f.get(k) == v for k, v in fields.items())


@dataclass
class CuttingProxy:
    target_port: int
    port: int = 0
    seen: list[dict[str, Any]] = field(default_factory=list)  # client frames, every connection
    cuts: int = 0
    _when: Match | None = None
    _swallow: bool = True
    _lose_from: Match | None = None
    _losing: bool = False

    def cut_at(self, when: Match, *, swallow: bool, lose_from: Match | None = None) -> None:
        self._when, self._swallow, self._lose_from, self._losing = when, swallow, lose_from, False

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime?duplex=1"

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            sr, sw = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            cw.close()
            return
        ends = (cw, sw)

        async def downstream() -> None:
            with contextlib.suppress(Exception):
                while data := await sr.read(65536):
                    cw.write(data)
                    await cw.drain()
            if not self._cut_done(ends):
                cw.close()

        async def upstream() -> None:
            buf = b""
            head = b""
            upgraded = False
            with contextlib.suppress(Exception):
                while data := await cr.read(65536):
                    if not upgraded:  # the HTTP upgrade passes as it is
                        head += data
                        end = head.find(b"\r\n\r\n")
                        if end < 0:
                            continue
                        sw.write(head[: end + 4])
                        buf, upgraded = head[end + 4 :], True
                    else:
                        buf += data
                    while (frame := _frame(buf)) is not None:
                        raw, payload, buf = frame
                        decoded = _json(payload)
                        if decoded is not None:
                            self.seen.append(decoded)
                        if self._cut(decoded, raw, sw, ends):
                            return
                    await sw.drain()
            if not self._cut_done(ends):
                sw.close()

        await asyncio.gather(upstream(), downstream())

    def _cut(self, frame: dict[str, Any] | None, raw: bytes, sw: Any, ends: Any) -> bool:
        """Forward ``raw`` unless armed otherwise; True once the connection was cut."""
        if frame is not None and self._lose_from is not None and self._lose_from(frame):
            self._losing, self._lose_from = True, None
        if frame is not None and self._when is not None and self._when(frame):
            self._when, self._losing = None, False
            if not self._swallow:
                sw.write(raw)
            self.cuts += 1
            _reset(ends)
            return True
        if not self._losing:
            sw.write(raw)
        return False

    @staticmethod
    def _cut_done(ends: Any) -> bool:
        return any(w.is_closing() for w in ends)


def _frame(buf: bytes) -> tuple[bytes, bytes, bytes] | None:
    """One complete client frame at the start of ``buf``: (its bytes, the unmasked payload,
    the rest); None when incomplete."""
    if len(buf) < 2:
        return None
    length, at = buf[1] & 0x7F, 2
    if length == 126:
        if len(buf) < 4:
            return None
        length, at = struct.unpack("!H", buf[2:4])[0], 4
    elif length == 127:
        if len(buf) < 10:
            return None
        length, at = struct.unpack("!Q", buf[2:10])[0], 10
    masked = buf[1] & 0x80
    end = at + (4 if masked else 0) + length
    if len(buf) < end:
        return None
    payload = buf[at + 4 : end] if masked else buf[at:end]
    if masked:
        mask = buf[at : at + 4]
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return buf[:end], payload, buf[end:]


def _json(payload: bytes) -> dict[str, Any] | None:
    with contextlib.suppress(ValueError):
        decoded = json.loads(payload)
        return decoded if isinstance(decoded, dict) else None
    return None


def _reset(ends: Any) -> None:
    """RST both sockets (SO_LINGER 0): the dead path both ends see."""
    for writer in ends:
        sock = writer.get_extra_info("socket")
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()


@contextlib.asynccontextmanager
async def cutting_proxy(target_port: int) -> AsyncIterator[CuttingProxy]:
    """A :class:`CuttingProxy` in front of ``127.0.0.1:target_port`` for the block."""
    proxy = CuttingProxy(target_port)
    server = await asyncio.start_server(proxy._handle, "127.0.0.1", 0)
    proxy.port = int(server.sockets[0].getsockname()[1])
    try:
        yield proxy
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)
