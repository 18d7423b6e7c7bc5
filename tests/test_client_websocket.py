"""The lean client websocket against websockets' own server on loopback.

The server side is the library's reference implementation, so what it accepts is what a
real server's parser accepts: our hand-built masked frames at every length encoding, and its
pings, fragmented messages, refusals and close frames must come through the lean client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI
from websockets.http11 import Request, Response

from duplexctl.client.websocket import MASK_POOL_BYTES, WebSocket, open_websocket

pytestmark = pytest.mark.timeout(30)

Handler = Callable[[ServerConnection], Any]


async def _start(handler: Handler, **kwargs: Any) -> tuple[Server, str]:
    server = await serve(handler, "127.0.0.1", 0, compression=None, **kwargs)
    port = next(iter(server.sockets)).getsockname()[1]
    return server, f"ws://127.0.0.1:{port}/v1/realtime"


async def _echo(ws: ServerConnection) -> None:
    """Echoes every message back, prefixed with its length as the server parsed it."""
    async for message in ws:
        await ws.send(f"{len(message)}:{message}")


@pytest.fixture
async def echo_url() -> AsyncIterator[str]:
    server, url = await _start(_echo, max_size=None)
    async with server:
        yield url


async def test_frames_of_every_length_encoding_reach_the_server_intact(echo_url: str) -> None:
    ws = await open_websocket(echo_url, max_size=None)
    # 7-bit, 16-bit and 64-bit payload lengths, their edges, and non-ASCII text
    texts = ["", "a", "x" * 125, "y" * 126, "z" * 65535, "w" * 65536, "é€" * 40000]
    for text in texts:
        ws.send(text)
        assert await asyncio.wait_for(ws.recv(), 5) == f"{len(text)}:{text}"
    await ws.close()
    assert ws.closed and ws.close_code == 1000


async def test_masks_come_from_a_pool_and_differ_per_frame(echo_url: str) -> None:
    ws = await open_websocket(echo_url)
    frames = [ws._client_frame(0x81, b"same payload") for _ in range(MASK_POOL_BYTES // 4 + 3)]
    masks = [f[2:6] for f in frames]
    # a refill happened and still no mask repeats (2**32 space; a repeat would mean reuse)
    assert len(set(masks)) == len(masks)
    assert all(f[0] == 0x81 and f[1] == 0x80 | len(b"same payload") for f in frames)
    await ws.close()


async def test_messages_before_deliver_queue_then_flush_in_order() -> None:
    async def talker(ws: ServerConnection) -> None:
        for i in range(5):
            await ws.send(f"m{i}")
        await ws.wait_closed()

    server, url = await _start(talker)
    async with server:
        ws = await open_websocket(url)
        first, recv_ns = await asyncio.wait_for(ws.recv_timed(), 5)
        assert first == "m0" and recv_ns > 0
        await asyncio.sleep(0.2)  # the rest arrive and queue
        got: list[str] = []
        ws.deliver(lambda message, _ns: got.append(str(message)))
        assert got == ["m1", "m2", "m3", "m4"]
        await ws.close()


async def test_fragmented_messages_pings_and_binary_frames() -> None:
    pong = asyncio.Event()

    async def server_side(ws: ServerConnection) -> None:
        await ws.send(iter(["frag", "mented", " text"]))  # three frames, one message
        await ws.send(b"\x00\x01binary")
        waiter = await ws.ping(b"are you there")
        await asyncio.wait_for(waiter, 5)  # the lean client answered by itself
        pong.set()
        await ws.send("after the ping")
        await ws.wait_closed()

    server, url = await _start(server_side)
    async with server:
        ws = await open_websocket(url)
        got: list[Any] = []
        done = asyncio.Event()

        def on_message(message: str | bytes, _ns: int) -> None:
            got.append(message)
            if message == "after the ping":
                done.set()

        ws.deliver(on_message)
        await asyncio.wait_for(done.wait(), 5)
        assert pong.is_set()
        assert got == ["fragmented text", b"\x00\x01binary", "after the ping"]
        await ws.close()


async def test_server_close_code_and_reason_reach_on_close() -> None:
    async def closer(ws: ServerConnection) -> None:
        await ws.recv()
        await ws.close(4001, "session replaced")

    server, url = await _start(closer)
    async with server:
        ws = await open_websocket(url)
        seen: list[tuple[int | None, str]] = []
        ws.on_close = lambda w: seen.append((w.close_code, w.close_reason))
        ws.deliver(lambda *_: None)
        ws.send("hello")
        await asyncio.wait_for(ws.wait_closed(), 5)
        assert seen == [(4001, "session replaced")]
        with pytest.raises(ConnectionClosed) as caught:
            ws.send("too late")
        assert caught.value.rcvd is not None and caught.value.rcvd.code == 4001
        with pytest.raises(ConnectionClosed):
            await ws.recv()


async def test_abort_is_seen_as_abnormal_closure(echo_url: str) -> None:
    ws = await open_websocket(echo_url)
    ws.abort()
    await asyncio.wait_for(ws.wait_closed(), 5)
    assert ws.close_code == 1006 and not ws.open


async def test_refused_upgrade_raises_invalid_status_with_the_http_status() -> None:
    def refuse(_conn: ServerConnection, request: Request) -> Response:
        assert request.headers["Authorization"] == "Bearer k"
        assert request.headers["User-Agent"] == "duplexctl-test"
        return Response(403, "Forbidden", Headers(), b"no")

    async def never(_ws: ServerConnection) -> None:  # pragma: no cover - refused first
        raise AssertionError

    server, url = await _start(never, process_request=refuse)
    async with server:
        with pytest.raises(InvalidStatus) as caught:
            await open_websocket(
                url, headers={"Authorization": "Bearer k"}, user_agent="duplexctl-test"
            )
        assert caught.value.response.status_code == 403


async def test_bad_urls_and_closed_ports_raise_the_usual_errors() -> None:
    with pytest.raises(InvalidURI):
        await open_websocket("http://127.0.0.1:1/x")
    with pytest.raises(OSError):
        await open_websocket("ws://127.0.0.1:1/x")


async def test_oversized_server_message_fails_the_connection() -> None:
    async def big(ws: ServerConnection) -> None:
        await ws.send("x" * 2000)
        await ws.wait_closed()

    server, url = await _start(big)
    async with server:
        ws: WebSocket = await open_websocket(url, max_size=1000)
        ws.deliver(lambda *_: pytest.fail("an oversized message was delivered"))
        await asyncio.wait_for(ws.wait_closed(), 5)
        assert ws.protocol.close_sent is not None and ws.protocol.close_sent.code == 1009


def test_the_same_under_uvloop() -> None:
    """load and replay run on uvloop, whose transports differ from asyncio's."""
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> list[str]:
        server, url = await _start(_echo, max_size=None)
        async with server:
            ws = await open_websocket(url, max_size=None)
            got: list[str] = []
            done = asyncio.Event()

            def on_message(message: str | bytes, _ns: int) -> None:
                got.append(str(message))
                if len(got) == 2:
                    done.set()

            ws.deliver(on_message)
            ws.send("a" * 70000)
            ws.send("b")
            await asyncio.wait_for(done.wait(), 5)
            await ws.close()
            return [g[:8] for g in got]

    assert uvloop.run(scenario()) == ["70000:aa", "1:b"]


# -- the fast parser, fed byte streams directly ---------------------------------------------


class _Transport:
    """Records what the client writes (asyncio.Transport's surface that WebSocket uses)."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closing

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True


def _server_frame(opcode: int, payload: bytes, *, fin: bool = True, mask: bool = False) -> bytes:
    first = (0x80 if fin else 0) | opcode
    n = len(payload)
    m = 0x80 if mask else 0
    if n < 126:
        head = bytes((first, m | n))
    elif n < 65536:
        head = bytes((first, m | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((first, m | 127)) + n.to_bytes(8, "big")
    if mask:
        return head + b"\x00\x00\x00\x00" + payload  # a zero mask leaves the payload as is
    return head + payload


async def _upgraded(max_size: int | None = 2**20) -> tuple[WebSocket, _Transport, bytes, list[Any]]:
    """A client that sent its upgrade request, and the server's 101 answer for it."""
    from websockets.client import ClientProtocol
    from websockets.uri import parse_uri
    from websockets.utils import accept_key

    protocol = ClientProtocol(parse_uri("ws://127.0.0.1:9/x"), max_size=max_size)
    ws = WebSocket(protocol)
    transport = _Transport()
    ws.connection_made(transport)  # type: ignore[arg-type]
    request = protocol.connect()
    protocol.send_request(request)
    ws._write_pending()
    answer = (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept_key(request.headers['Sec-WebSocket-Key'])}\r\n\r\n"
    ).encode()
    got: list[Any] = []
    ws.deliver(lambda message, _ns: got.append(message))
    return ws, transport, answer, got


def _unmask(frame: bytes) -> tuple[int, bytes]:
    n, at = frame[1] & 0x7F, 2
    if n == 126:
        n, at = int.from_bytes(frame[2:4], "big"), 4
    mask = frame[at : at + 4]
    body = frame[at + 4 : at + 4 + n]
    return frame[0], bytes(b ^ mask[i % 4] for i, b in enumerate(body))


STREAM_MESSAGES: list[Any] = ["hi", "é" * 150, b"\x00bin", "fragmented!", "z" * 70000]


def _stream() -> bytes:
    return b"".join(
        [
            _server_frame(1, b"hi"),
            _server_frame(1, ("é" * 150).encode()),  # 16-bit length
            _server_frame(9, b"ping-1"),
            _server_frame(2, b"\x00bin"),
            _server_frame(1, b"frag", fin=False),
            _server_frame(9, b"ping-2"),  # a control frame inside a fragmented message
            _server_frame(0, b"ment", fin=False),
            _server_frame(0, b"ed!"),
            _server_frame(10, b"unsolicited pong"),
            _server_frame(1, b"z" * 70000),  # 64-bit length
        ]
    )


@pytest.mark.parametrize("split", ["whole", "bytewise", "random"])
async def test_fast_parser_reassembles_any_segmentation(split: str) -> None:
    import random

    ws, transport, answer, got = await _upgraded()
    data = answer + _stream()
    if split == "whole":
        pieces = [data]
    elif split == "bytewise":
        pieces = [data[i : i + 1] for i in range(len(data))]
    else:
        rng = random.Random(3)
        cuts = sorted(rng.sample(range(1, len(data)), 60))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    for piece in pieces:
        ws.data_received(piece)
    assert ws._fast and ws.open
    assert got == STREAM_MESSAGES
    pongs = [_unmask(w) for w in transport.written[1:]]  # [0] is the upgrade request
    assert pongs == [(0x8A, b"ping-1"), (0x8A, b"ping-2")]


async def test_a_close_frame_hands_over_to_the_protocol() -> None:
    ws, transport, answer, got = await _upgraded()
    close = _server_frame(8, (4001).to_bytes(2, "big") + b"bye")
    ws.data_received(answer + _server_frame(1, b"last") + close + _server_frame(1, b"x"))
    assert got == ["last"]
    assert not ws._fast and ws.protocol.close_rcvd is not None
    assert ws.protocol.close_rcvd.code == 4001
    assert _unmask(transport.written[-1])[0] == 0x88  # the close reply went out


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (_server_frame(1, b"masked", mask=True), 1002),  # servers must not mask
        (bytes((0xC1, 2)) + b"ok", 1002),  # RSV1 without an extension
        (_server_frame(3, b"?"), 1002),  # reserved opcode
        (_server_frame(9, b"p" * 126), 1002),  # control frame over 125 bytes
        (_server_frame(9, b"p", fin=False), 1002),  # fragmented control frame
        (_server_frame(1, b"y" * 2000), 1009),  # over max_size
        (_server_frame(0, b"cont"), 1002),  # continuation without a start
        (_server_frame(1, b"a", fin=False) + _server_frame(1, b"b"), 1002),  # no continuation
        (_server_frame(1, b"\xff\xfe"), 1007),  # invalid UTF-8
        (_server_frame(1, b"a", fin=False) + _server_frame(0, b"b" * 1000), 1009),
    ],
)
async def test_bad_frames_fail_the_connection_with_the_right_code(frame: bytes, code: int) -> None:
    ws, _transport, answer, got = await _upgraded(max_size=1000)
    ws.data_received(answer + _server_frame(1, b"fine"))
    ws.data_received(frame + _server_frame(1, b"never delivered"))
    assert got == ["fine"]
    sent = ws.protocol.close_sent
    assert sent is not None and sent.code == code
    assert not ws.open
