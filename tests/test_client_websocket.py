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


@pytest.fixture
async def echo_url() -> AsyncIterator[str]:
    """Echoes every message back, prefixed with its length as the server parsed it."""

    async def echo(ws: ServerConnection) -> None:
        async for message in ws:
            await ws.send(f"{len(message)}:{message}")

    server, url = await _start(echo, max_size=None)
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
    frames = [ws._text_frame(b"same payload") for _ in range(MASK_POOL_BYTES // 4 + 3)]
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
        async def echo(ws: ServerConnection) -> None:
            async for message in ws:
                await ws.send(f"{len(message)}:{message}")

        server, url = await _start(echo, max_size=None)
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
