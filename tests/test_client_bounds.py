"""Every wait of the client is bounded by its documented figure (issue 31.3; docs/protocol.md
§6.8 "duplexctl: every wait is bounded").

Against hostile servers that keep ending connections (``support.hostile_servers``: TCP
dropped after a few frames of every connection, ``session.close`` answered by a drop or not
at all, resumes never answered or refused, a reply cut short), eight connections at a time,
hypothesis choosing each server's ways: the open returns within its timeout, every resume
ends (resumed or given up) within ``resume_bound_s``, and :meth:`DuplexConnection.close`
returns within ``close_bound_s`` — it used to wait out a running resume, then a reattach,
then ``session.closed`` in turn (40 s seen). A server that stops reading costs the socket
after ``drain_timeout_s``, never a send that waits for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile_clients import fuzz_examples
from support.hostile_servers import Script, event, hostile, replay_against, reply_frames

from duplexctl.client import ConnectionOptions, DuplexConnection, OpenFailed
from duplexctl.client.connection import ConnectionLost, ConnectionLostError
from duplexctl.protocol.client_state import Happening, SessionResumed
from duplexctl.protocol.settings import SessionSettings

pytestmark = [pytest.mark.realtime, pytest.mark.timing]

#: short bounds, so an example takes seconds (the property holds for any); a resume attempt
#: longer than the close timeout, as with the defaults
OPTIONS = dict(
    open_timeout_s=2.0,
    resume_timeout_s=4.0,
    resume_attempts=2,
    backoff_min_s=0.1,
    backoff_max_s=0.4,
    close_timeout_s=1.5,
    drain_timeout_s=1.5,
    heartbeat_s=0.5,
    ack_interval_s=0.1,
)
OPEN_TIMEOUT_S = 2.0
#: scheduling slack of eight connections and their servers on one loaded machine
SLACK_S = 1.0
CASES = 8

servers = st.builds(
    Script,
    drop_every=st.one_of(st.none(), st.integers(1, 6)),
    on_close=st.sampled_from(["closed", "drop", "ignore"]),
    hang_resume=st.booleans(),
    refuse_resume=st.booleans(),
    drop_mid_reply=st.one_of(st.none(), st.integers(0, 2)),
    created_delay_s=st.sampled_from([0.0, 0.05]),
)


async def one_case(script: Script, talk_s: float) -> dict[str, Any]:
    """Open, commit a turn, listen for ``talk_s``, close: how long each wait took."""
    options = ConnectionOptions(**OPTIONS)
    lost_at: list[float] = []
    resumes: list[float] = []

    def watch(h: Happening) -> None:
        now = time.monotonic()
        if isinstance(h, ConnectionLost) and h.resuming:
            lost_at.append(now)
        elif lost_at and (
            isinstance(h, SessionResumed) or (isinstance(h, ConnectionLost) and not h.resuming)
        ):
            resumes.append(now - lost_at.pop())

    out: dict[str, Any] = {"script": script, "resumes": resumes}
    async with hostile("duplex", script=script) as server:
        t0 = time.monotonic()
        try:
            conn = await DuplexConnection.open(
                server.url, SessionSettings(), timeout=OPEN_TIMEOUT_S, options=options,
                listeners=[watch],
            )  # fmt: skip
        except OpenFailed:
            out["open_s"] = time.monotonic() - t0
            return out
        out["open_s"] = time.monotonic() - t0
        with contextlib.suppress(ConnectionLostError):
            await conn.send(conn.session.commit(response_create=True))
        await asyncio.sleep(talk_s)
        t1 = time.monotonic()
        await conn.close()
        out["close_s"] = time.monotonic() - t1
        out["unfinished_resume"] = bool(lost_at) and not conn.session.ended
    out["options"] = options
    return out


@pytest.mark.timeout(900)
@settings(
    max_examples=fuzz_examples(4), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    scripts=st.lists(servers, min_size=CASES, max_size=CASES),
    talk=st.lists(st.sampled_from([0.0, 0.3, 1.0, 2.5]), min_size=CASES, max_size=CASES),
)
def test_every_wait_is_bounded_against_servers_that_keep_ending_connections(
    scripts: list[Script], talk: list[float]
) -> None:
    async def main() -> list[dict[str, Any]]:
        return await asyncio.gather(*(one_case(s, t) for s, t in zip(scripts, talk, strict=True)))

    for case in asyncio.run(main()):
        options = case.get("options") or ConnectionOptions(**OPTIONS)
        assert case["open_s"] <= OPEN_TIMEOUT_S + SLACK_S, case
        for took in case["resumes"]:
            assert took <= options.resume_bound_s + SLACK_S, case
        if "close_s" in case:
            assert case["close_s"] <= options.close_bound_s + SLACK_S, case


def test_the_bounds_are_the_documented_figures() -> None:
    """docs/protocol.md §6.8 states these for the defaults."""
    options = ConnectionOptions()
    assert options.close_bound_s == 12.0
    assert options.drain_timeout_s == 10.0
    assert round(options.resume_bound_s, 3) == 55.625


async def test_a_server_that_stops_reading_costs_the_socket_not_a_send_for_ever() -> None:
    options = ConnectionOptions(**OPTIONS)
    async with hostile("duplex", script=Script(stop_reading=True, on_close="ignore")) as server:
        conn = await DuplexConnection.open(server.url, SessionSettings(), options=options)
        big = json.dumps({"type": "conversation.item.create", "pad": "x" * 256 * 1024})
        t0 = time.monotonic()
        with pytest.raises(ConnectionLostError, match="read nothing"):
            async with asyncio.timeout(60):
                while True:  # until the kernel's buffers are full and the drain waits
                    t0 = time.monotonic()
                    await conn.send_text(big)
        assert time.monotonic() - t0 <= options.drain_timeout_s + SLACK_S
        t1 = time.monotonic()
        await conn.close()
        assert time.monotonic() - t1 <= options.close_bound_s + SLACK_S


async def test_a_replay_ends_in_bounded_time_when_the_server_ends_the_session_and_drops() -> None:
    """The server says ``session.closed`` and goes on sending until it drops the connection:
    the run ends at once. Its microphone, cancelled at the end of the run while its send met
    the closing socket, used to swallow the cancellation (Python 3.11's ``wait_for``) and run
    on until its caller gave up (30 s here, 100 s in bench/fuzz_client.py)."""

    async def one(drop_every: int, frames: int) -> float:
        stream = [json.dumps(event("session.closed", 2, reason="bye"))]
        stream += [json.dumps(f) for f in reply_frames(3, 2)][:frames]
        t0 = time.monotonic()
        async with asyncio.timeout(30):
            await replay_against(stream, Script(drop_every=drop_every, on_close="drop"))
        return time.monotonic() - t0

    took = await asyncio.gather(*(one(d, n) for d in (3, 4, 5, 6, 8) for n in (0, 2, 4)))
    assert max(took) < 10, took
