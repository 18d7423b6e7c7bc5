"""The connection against hostile servers over real loopback sockets (issue 17.1, 17.2, 17.7).

Every way a server can fail a client's open becomes one :class:`OpenFailed` with one
``cause`` of the fixed vocabulary and one line naming what the server did, in bounded time;
after a correct handshake, frames that are not the protocol are recorded violations with
their first bytes as evidence and the session goes on and closes cleanly.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from typing import Any

import pytest
from support.hostile_servers import Script, event

from duplexctl.client import ConnectionOptions, DuplexConnection, OpenFailed, ViolationRecorded
from duplexctl.client.causes import ADMISSION, Cause
from duplexctl.client.target import TlsPolicy
from duplexctl.protocol.settings import SessionSettings

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(120)]

SETTINGS = SessionSettings()
FAST = ConnectionOptions(open_timeout_s=2.0, close_timeout_s=2.0)

# kind -> (cause, words the one-line message must contain)
CASES: dict[str, tuple[Cause, str]] = {
    "hang": (Cause.HANDSHAKE_TIMEOUT, "sent no session.created within 2 s"),
    "garbage_text": (Cause.GARBAGE, "not JSON: b'<html>this is not JSON</html>'"),
    "garbage_binary": (Cause.GARBAGE, "a binary frame"),
    "garbage_array": (Cause.GARBAGE, "not an object (a list): b'[1, 2, 3]'"),
    "drop_after_upgrade": (Cause.CLOSED_AFTER_UPGRADE, "right after the websocket upgrade (TCP"),
    "close_after_upgrade": (Cause.CLOSED_AFTER_UPGRADE, "close frame 1011 'going away'"),
    "plain_http": (Cause.NOT_WEBSOCKET, "HTTP 200 OK instead of switching to a websocket"),
    "http_404": (Cause.HTTP_STATUS, "HTTP 404 Not Found (no websocket at this path"),
    "silent_tcp": (Cause.TIMEOUT, "did not answer the websocket upgrade within 2 s"),
    "not_http": (Cause.NOT_WEBSOCKET, "not HTTP: b'SSH-2.0-OpenSSH_9.6\\r\\n'"),
    "nothing": (Cause.REFUSED, "nothing is listening"),
}


async def open_failure(url: str, **options: Any) -> tuple[OpenFailed, float]:
    opts = ConnectionOptions(open_timeout_s=2.0, close_timeout_s=2.0, **options)
    t0 = time.monotonic()
    with pytest.raises(OpenFailed) as caught:
        await DuplexConnection.open(url, SETTINGS, timeout=2.0, options=opts)
    return caught.value, time.monotonic() - t0


@pytest.mark.parametrize("kind", sorted(CASES))
async def test_each_hostile_server_is_one_cause_and_one_line(
    kind: str, hostile_server: Any
) -> None:
    server = await hostile_server(kind)
    exc, took = await open_failure(server.url)
    cause, words = CASES[kind]
    assert exc.cause is cause and exc.admission == ADMISSION[cause] and exc.exit_code == 3
    assert words in str(exc) and "\n" not in str(exc)
    assert str(exc).startswith(server.url)  # the URL as given: never our autostart=0
    assert took < 15  # bounded: the 2 s timeouts, or at once


async def test_a_tls_server_that_never_answers_is_a_timeout(hostile_server: Any) -> None:
    server = await hostile_server("silent_tcp")
    exc, _ = await open_failure(server.url.replace("ws://", "wss://"))
    assert exc.cause is Cause.TIMEOUT and "did not complete the TLS connection" in str(exc)


async def test_ws_to_a_tls_port_and_wss_to_a_plain_port_say_which(hostile_server: Any) -> None:
    tls = await hostile_server("duplex", tls=True)
    exc, _ = await open_failure(tls.url.replace("wss://", "ws://"))
    assert exc.cause is Cause.NOT_WEBSOCKET and "use wss://" in str(exc)
    plain = await hostile_server("duplex")
    exc, _ = await open_failure(plain.url.replace("ws://", "wss://"))
    assert exc.cause is Cause.TLS and "use ws://" in str(exc)


async def test_self_signed_certificate_fails_verification_then_ca_file_or_insecure_work(
    hostile_server: Any,
) -> None:
    server = await hostile_server("duplex", tls=True)
    exc, _ = await open_failure(server.url, tls=TlsPolicy())
    assert exc.cause is Cause.TLS and "--ca-file" in str(exc) and "--insecure" in str(exc)
    for policy in (TlsPolicy(ca_file=server.ca_file), TlsPolicy(insecure=True)):
        conn = await DuplexConnection.open(
            server.url, SETTINGS, timeout=5, options=ConnectionOptions(tls=policy)
        )
        assert conn.session.created
        await conn.close()
        assert conn.session.closed


async def test_give_up_ends_an_open_at_once(hostile_server: Any) -> None:
    server = await hostile_server("hang")
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.3, stop.set)
    t0 = time.monotonic()
    with pytest.raises(OpenFailed) as caught:
        await DuplexConnection.open(server.url, SETTINGS, timeout=30, give_up=stop)
    assert time.monotonic() - t0 < 5
    assert caught.value.gave_up and caught.value.cause is Cause.HANDSHAKE_TIMEOUT
    assert "the run stopped" in str(caught.value)


@pytest.mark.parametrize("how", ["give_up", "cancel"])
async def test_an_open_abandoned_mid_handshake_still_closes_its_session(
    hostile_server: Any, how: str
) -> None:
    """Stopped after session.update went out but before session.created came back (Ctrl-C,
    SIGTERM, the run's end): the server creates the session anyway, and a dropped socket would
    hold its slot for the whole disconnect grace — so the client waits briefly for
    session.created and sends session.close (it made probe's SIGTERM test flaky)."""
    server = await hostile_server("duplex", script=Script(created_delay_s=0.8))
    stop = asyncio.Event()
    opening = asyncio.ensure_future(
        DuplexConnection.open(
            server.url, SETTINGS, timeout=30, give_up=stop if how == "give_up" else None
        )
    )
    deadline = time.monotonic() + 10
    while not server.received and time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # until session.update reached the server
    assert [f.get("type") for f in server.received] == ["session.update"]
    if how == "give_up":
        stop.set()
        with pytest.raises(OpenFailed) as caught:
            await opening
        assert caught.value.gave_up
    else:
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
    sent = [f.get("type") for f in server.received]
    assert sent[0] == "session.update" and sent[-1] == "session.close", sent


async def test_malformed_events_after_the_handshake_are_violations_with_evidence(
    hostile_server: Any,
) -> None:
    """Nothing raises, every frame is judged, the session still closes cleanly."""
    script = Script(
        after_handshake=[
            "not json {",
            b"\x00binary",
            "[1, 2]",
            json.dumps(event("response.created", 2, response_id=7)),
            json.dumps(event("response.output_audio.delta", 3, response_id="r", delta="!!")),
            json.dumps(event("session.heartbeat_ack", 3)),
        ]
    )
    server = await hostile_server("duplex", script=script)
    seen: list[Any] = []
    conn = await DuplexConnection.open(
        server.url, SETTINGS, timeout=5, options=FAST, listeners=[seen.append]
    )
    await asyncio.sleep(0.5)
    await conn.close()
    counts = conn.session.checker.counts()
    assert counts["not_json"] == counts["binary_frame"] == counts["not_object"] == 1
    assert counts["malformed_event"] == 1 and counts["seq_out_of_order"] == 1
    assert counts["unknown_response"] == 1 and counts["audio_decode"] == 1
    recorded = [h.violation for h in seen if isinstance(h, ViolationRecorded)]
    assert [v.name for v in recorded] == [v.name for v in conn.session.checker.violations]
    by_name = {v.name: v for v in recorded}
    assert by_name["not_json"].frame == "b'not json {'"
    assert "response_id is int 7" in by_name["malformed_event"].detail
    assert '"response_id":7' in (by_name["malformed_event"].frame or "")
    assert by_name["seq_out_of_order"].seq == 3 and by_name["seq_out_of_order"].recv_ns
    assert conn.session.closed  # session.close answered: a clean end


async def test_refused_resume_after_a_drop_mid_reply_ends_the_stream(hostile_server: Any) -> None:
    server = await hostile_server("duplex", script=Script(drop_mid_reply=2, refuse_resume=True))
    conn = await DuplexConnection.open(
        server.url,
        SETTINGS,
        timeout=5,
        options=ConnectionOptions(resume_attempts=1, close_timeout_s=2.0),
    )
    await conn.send(conn.session.commit(response_create=True))
    lost = []
    async with asyncio.timeout(20):
        while (h := await conn.next()) is not None:
            if h.type == "connection.lost":
                lost.append(h)
    assert [h.resuming for h in lost] == [True, False]
    assert conn.timings.resumes[0].outcome == "invalid_resume_token"
    await conn.close()


def test_ssl_is_what_the_policy_says(tmp_path: Any) -> None:
    assert TlsPolicy().context().verify_mode is ssl.CERT_REQUIRED
    insecure = TlsPolicy(insecure=True).context()
    assert insecure.verify_mode is ssl.CERT_NONE and not insecure.check_hostname
