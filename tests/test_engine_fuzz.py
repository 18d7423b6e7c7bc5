"""Property tests: malformed and out-of-order events never break an EngineSession.

Sessions open with hostile session objects (when the opening is refused, that refusal must be
a documented code) and then receive mixes of well-formed traffic and hostile events of every
client type (tests/support/hostile_clients.py). Whatever arrives:

* ``receive`` raises nothing but ProtocolError with a documented code (docs/protocol.md §4.5);
* every command is answered in bounded time and the mailbox never dies: a heartbeat sent
  after the batch is acknowledged;
* no emitted error is ``internal_error``, nothing is logged at ERROR, and every emitted event
  can be encoded for the wire (the harness encodes like the journal);
* ``session.close`` still ends the session with ``session.closed`` as its last event.

These are the properties that the session rates 0, -16000 and 2**63 and the 2**64 clock hint
broke on main. CI runs a bounded number of examples; ``DUPLEXCTL_FUZZ_EXAMPLES=5000`` runs more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.engine import OPEN_TURN, Harness, turn_config
from support.hostile_clients import (
    DOCUMENTED,
    ENGINE_TYPES,
    event_of,
    exit_if_hung,
    fuzz_examples,
    good_events,
    logged_errors,
    resolve,
    session_patch,
)

from duplexctl.protocol.errors import ProtocolError
from duplexctl.server.session import validate_open

OPEN_NATIVE = {**OPEN_TURN, "extra_body": {"auto_response": True}}
hostile_events = event_of(ENGINE_TYPES)
batches = st.lists(st.one_of(good_events, hostile_events, hostile_events), max_size=16)


@pytest.fixture(autouse=True)
def watchdog(request: pytest.FixtureRequest) -> Iterator[None]:
    with exit_if_hung(request.config, 240):
        yield


async def _drive(profile: str, opening: dict[str, Any], batch: list[dict[str, Any]]) -> None:
    config = turn_config(
        model_profile=profile, realtime_factor=0.0, ttfa_ms=0.0, reply_seconds=0.2, chunk_ms=100
    )
    try:
        validate_open(opening, config)
    except ProtocolError as exc:  # a refused opening is fine, with a documented code
        assert exc.code in DOCUMENTED | {"invalid_session_config"}, exc
        return
    h = Harness(config, opening)
    h.start()
    for event in batch:
        event = resolve(event, h.events)
        try:
            h.session.receive(event)
        except ProtocolError as exc:
            assert exc.code in DOCUMENTED, (exc.code, exc.message, event)
            continue
        async with asyncio.timeout(10):
            await h.session.drain()
    async with asyncio.timeout(10):
        await asyncio.sleep(0.01)
        await h.session.drain()
        if not h.session.closed:
            h.session.receive({"type": "session.heartbeat", "event_id": "probe"})
            await h.wait_for("session.heartbeat_ack", timeout=10)
    for event in h.events:
        if event["type"] == "error":
            assert event["error"]["code"] in DOCUMENTED, event
    await h.session.close("client_close")
    assert h.events[-1]["type"] in ("session.closed", "session.expired")


@settings(
    max_examples=fuzz_examples(400),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    st.sampled_from(["turn", "native"]),
    st.one_of(st.just({}), session_patch),
    st.sampled_from([None, {"type": "server_vad"}]),
    batches,
)
@pytest.mark.slow
def test_hostile_sessions_only_get_documented_answers(
    profile: str, patch: dict[str, Any], td: Any, batch: list[dict[str, Any]]
) -> None:
    base = OPEN_NATIVE if profile == "native" and td is None else OPEN_TURN
    opening = {**base, "turn_detection": td, **patch}
    with logged_errors() as errors:
        asyncio.run(_drive(profile, opening, batch))
    assert not errors, errors
