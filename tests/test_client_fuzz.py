"""Fuzz the client with malformed server streams (issue 16.4, client side; issue 16.1).

Two levels, fed by the same stream generator (``hostile.malformed_stream``: well-formed
replies with fields missing, mistyped or out of range, wrong types, seqs, audio and response
ids, garbage frames, events after ``session.closed``):

* :class:`ClientSession` directly, many examples: digesting never raises, a frame that breaks
  the documented table (docs/protocol.md §4, ``protocol/server_events.py``) is always a
  recorded violation with its frame as evidence, and nothing a happening hands on is a
  number the table refused (what the runners compute with);
* the replay runner against a real loopback server sending such a stream after a correct
  handshake: the run ends by itself, in bounded time, with a report (exit 0 or 1), whatever
  the server sent.

The exhaustive single-fault grid (every field of every frame of a reply, set to every weird
value: several hundred cases) runs through :class:`ClientSession`, where every frame is
decided; a handful of its cases, one per frame type, go through a real socket and the
runner. ``DUPLEXCTL_FUZZ_EXAMPLES=N`` runs every grid case through sockets, and N examples
per property.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile_clients import fuzz_examples
from support.hostile_servers import (
    GARBAGE_FRAMES,
    WEIRD_VALUES,
    malformed_stream,
    replay_against,
    reply_frames,
    session_created,
)

from duplexctl.protocol import codec, server_events
from duplexctl.protocol.client_state import AudioDelta, ClientSession
from duplexctl.protocol.server_events import MAX_MS, MAX_RATE_HZ, SERVER_EVENTS, Kind

pytestmark = pytest.mark.realtime

#: the violation names the client may record (a new one must be added here on purpose)
KNOWN_VIOLATIONS = {
    "binary_frame",
    "not_json",
    "not_object",
    "malformed_event",
    "seq_out_of_order",
    "seq_gap",
    "unknown_response",
    "event_before_session_created",
    "duplicate_session_created",
    "event_after_session_closed",
    "duplicate_session_closed",
    "duplicate_response_created",
    "duplicate_response_done",
    "response_done_without_created",
    "delta_after_response_done",
    "old_epoch_delta",
    "audio_decode",
}


def opened() -> ClientSession:
    cs = ClientSession()
    cs.begin_connection()
    cs.on_frame(session_created(), 1)
    cs.on_frame({"type": "session.updated", "session": {}, "server_event_seq": 1}, 2)
    return cs


def feed(cs: ClientSession, stream: list[str | bytes]) -> list[Any]:
    """Digest a stream the way the transport does, but through ``on_frame`` (unguarded) for
    every decoded object, so an exception is the client's, not swallowed."""
    happenings = []
    for t, raw in enumerate(stream, start=10):
        try:
            frame = codec.loads(raw)
        except codec.FrameDecodeError:
            frame = None
        if isinstance(frame, dict) and isinstance(raw, str):
            happenings += cs.on_frame(frame, t)
        else:
            happenings += cs.on_message(raw, t)
    return happenings


def assert_safe_to_compute_with(cs: ClientSession, happenings: list[Any]) -> None:
    """What the runners do with the state after any stream must work and stay finite."""
    for h in happenings:
        if isinstance(h, AudioDelta):
            assert 1 <= h.sample_rate_hz <= MAX_RATE_HZ
            assert math.isfinite(h.audio_start_ms) and math.isfinite(h.audio_end_ms)
            assert abs(h.audio_end_ms) <= 2 * MAX_MS
    for rid, track in cs.responses.items():
        assert math.isfinite(track.audio_ms) and track.audio_ms <= 2 * MAX_MS
        cs.playback_ack(rid, track.audio_ms)
        cs.item_truncate(f"item_{rid}", track.audio_ms)
        track.audio_ms_after(0)
    cs.event_ack()
    if cs.can_resume:
        cs.resume()
    cs.checker.finish()
    json.dumps([v.to_dict() for v in cs.checker.violations])


@settings(
    max_examples=fuzz_examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(rng=st.randoms(use_true_random=False), rate=st.sampled_from([0.2, 0.5, 1.0]))
def test_client_session_survives_any_stream(rng: random.Random, rate: float) -> None:
    cs = opened()
    stream = malformed_stream(rng, frames=16, mutation_rate=rate)
    happenings = feed(cs, stream)
    names = set(cs.checker.counts())
    assert names <= KNOWN_VIOLATIONS, names - KNOWN_VIOLATIONS
    assert_safe_to_compute_with(cs, happenings)


def _mistyped(kind: Kind) -> st.SearchStrategy[Any]:
    """Values that are not of ``kind`` (or out of its range)."""
    weird = st.sampled_from(WEIRD_VALUES)
    checks = server_events._CHECKS  # the table's own notion of each kind
    return weird.filter(lambda v: not checks[kind](v))


_FIELDS = [
    (etype, field) for etype, fields in SERVER_EVENTS.items() for field in fields if field.path
]


@settings(max_examples=fuzz_examples(400), deadline=None)
@given(data=st.data(), pick=st.sampled_from(_FIELDS))
def test_a_mistyped_or_missing_field_is_always_a_violation(data: Any, pick: Any) -> None:
    """Every field of the table, broken one way or another, is recorded with its frame."""
    etype, field = pick
    frame = {
        "type": etype,
        "response_id": f"resp-{'0' * 8}",
        "response": {"id": "r", "status": "completed"},
        "delta": "AAAA",
        "session": {"id": "s"},
        "event": {},
        "error": {"code": "c", "message": "m"},
        "item_id": "i",
        "audio_start_ms": 0,
        "audio_end_ms": 0,
        "resume_token": "t",
        "reason": "r",
        "server_event_seq": 2,
    }
    keys = field.path.split(".")
    holder = frame
    for key in keys[:-1]:
        holder = holder.setdefault(key, {})
    missing = field.required and field.alt is None and data.draw(st.booleans())
    if missing:
        holder.pop(keys[-1], None)
    else:
        holder[keys[-1]] = data.draw(_mistyped(field.kind))
    cs = opened()
    cs.on_frame(frame, 5)
    malformed = [v for v in cs.checker.violations if v.name == "malformed_event"]
    assert malformed, f"{etype}: {field.path} broken, nothing recorded"
    assert malformed[0].frame is not None and malformed[0].seq == 2


@settings(max_examples=fuzz_examples(150), deadline=None)
@given(
    junk=st.one_of(
        st.sampled_from(GARBAGE_FRAMES),
        st.binary(max_size=80),
        st.text(max_size=80).filter(lambda t: not t.startswith("{")),
    )
)
def test_a_frame_that_is_not_an_object_is_a_violation_never_an_exception(junk: Any) -> None:
    cs = opened()
    before = cs.checker.total
    assert cs.on_message(junk, 5) == [] or isinstance(junk, str)
    if isinstance(junk, bytes) or not isinstance(_maybe_json(junk), dict):
        assert cs.checker.total == before + 1
        [v] = cs.checker.violations[-1:]
        assert v.name in ("binary_frame", "not_json", "not_object") and v.frame


def _maybe_json(text: str) -> Any:
    try:
        return codec.loads(text)
    except codec.FrameDecodeError:
        return None


# -- through a real server, into the replay runner -------------------------------------------


async def _replay_against(stream: list[str | bytes]) -> Any:
    async with asyncio.timeout(60):
        return await replay_against(stream)


@pytest.mark.timeout(600)
@settings(
    max_examples=fuzz_examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@pytest.mark.slow
@given(rng=st.randoms(use_true_random=False))
def test_replay_ends_cleanly_whatever_the_server_sends(rng: random.Random) -> None:
    stream = malformed_stream(rng, frames=14, mutation_rate=0.6)
    result = asyncio.run(_replay_against(stream))
    assert result.exit_code in (0, 1)
    json.dumps(result.report)
    names = set(result.report["violation_counts"])
    assert names <= KNOWN_VIOLATIONS


def _broken_replies() -> list[tuple[str, list[str | bytes]]]:
    """Every field of every frame of one reply (nested ones included), set to every weird
    value, one at a time: the exhaustive single-fault grid."""
    cases = []
    for index, frame in enumerate(reply_frames(2, 2)):
        paths = [(k,) for k in frame if k != "event_id"]
        paths += [(k, inner) for k, v in frame.items() if isinstance(v, dict) for inner in v]
        for path in paths:
            for value in WEIRD_VALUES:
                frames = json.loads(json.dumps(reply_frames(2, 2)))
                holder = frames[index]
                for key in path[:-1]:
                    holder = holder[key]
                holder[path[-1]] = value
                label = f"{frame['type']}.{'.'.join(path)}={value!r:.20}"
                cases.append((label, [json.dumps(f) for f in frames]))
    return cases


def test_every_field_of_a_reply_broken_every_way_is_digested() -> None:
    """The exhaustive single-fault grid through :class:`ClientSession`, where the client
    decides what every frame means: nothing raises, only known violations are recorded,
    and what the runners compute with stays finite."""
    cases = _broken_replies()
    assert len(cases) > 300
    for label, stream in cases:
        cs = opened()
        happenings = feed(cs, stream)
        names = set(cs.checker.counts())
        assert names <= KNOWN_VIOLATIONS, (label, names - KNOWN_VIOLATIONS)
        assert_safe_to_compute_with(cs, happenings)


#: how many grid cases go through a real socket by default
END_TO_END_CASES = 8


def _end_to_end_cases() -> list[tuple[str, list[str | bytes]]]:
    """The grid cases that go through a real socket into the replay runner: eight spread
    evenly over the grid (so over the reply's frames, their fields and the weird values), or
    every case when ``DUPLEXCTL_FUZZ_EXAMPLES`` is set (the long run)."""
    cases = _broken_replies()
    if os.environ.get("DUPLEXCTL_FUZZ_EXAMPLES"):
        return cases
    return cases[:: len(cases) // END_TO_END_CASES][:END_TO_END_CASES]


@pytest.mark.timeout(900)
async def test_replay_survives_broken_replies_end_to_end() -> None:
    cases = _end_to_end_cases()
    slots = asyncio.Semaphore(6)

    async def run(label: str, stream: list[str | bytes]) -> str | None:
        async with slots:
            try:
                result = await _replay_against(stream)
            except Exception as exc:
                return f"{label}: {type(exc).__name__}: {exc}"
            if result.exit_code not in (0, 1):
                return f"{label}: exit {result.exit_code}"
            return None

    failures = [f for f in await asyncio.gather(*(run(*c) for c in cases)) if f]
    assert len(cases) >= END_TO_END_CASES
    assert failures == [], f"{len(failures)} of {len(cases)}: {failures[:5]}"
