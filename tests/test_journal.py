"""The replay journal's rules (docs/protocol.md §6.6), without sockets and with a fake clock."""

from __future__ import annotations

import json

import pytest

from duplexctl.server.journal import AckError, Journal, JournalConflictError, JournalGapError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(max_bytes: int = 1 << 20, ttl_s: float = 60.0) -> tuple[Journal, Clock]:
    clock = Clock()
    return Journal(max_bytes=max_bytes, ttl_s=ttl_s, clock=clock), clock


def ev(n: int) -> dict[str, object]:
    return {
        "type": "session.heartbeat_ack",
        "event_id": f"event_{n:032x}",
        "session_id": "duplex-x",
    }


def test_seq_stamped_in_order_and_frame_is_compact_json_with_seq() -> None:
    journal, _ = make()
    entries = [journal.record(ev(n)) for n in range(3)]
    assert [e.seq for e in entries if e] == [1, 2, 3]
    assert journal.head == 3
    first = entries[0]
    assert first is not None
    decoded = json.loads(first.frame)
    assert decoded == {**ev(0), "server_event_seq": 1}
    assert list(decoded)[-1] == "server_event_seq"  # seq last, like the real server
    assert b" " not in first.frame  # compact
    assert journal.retained_bytes == sum(len(e.frame) for e in entries if e)


def test_replay_after_returns_original_frames() -> None:
    journal, _ = make()
    frames = [journal.record(ev(n)) for n in range(5)]
    replay = journal.replay_after(2)
    assert [e.seq for e in replay] == [3, 4, 5]
    assert [e.frame for e in replay] == [f.frame for f in frames[2:] if f]
    assert journal.replay_after(5) == []


def test_ack_trims_and_moves_boundary() -> None:
    journal, _ = make()
    for n in range(4):
        journal.record(ev(n))
    journal.acknowledge(2)
    assert journal.boundary == 2
    assert len(journal) == 2
    journal.acknowledge(1)  # an older ack is a no-op
    assert journal.boundary == 2
    assert [e.seq for e in journal.replay_after(2)] == [3, 4]  # exactly at the boundary: fine
    with pytest.raises(JournalGapError):
        journal.replay_after(1)


@pytest.mark.parametrize(
    ("seq", "message"),
    [
        (-1, "session.event_ack requires a non-negative server_event_seq"),
        ("3", "session.event_ack requires a non-negative server_event_seq"),
        (1.5, "session.event_ack requires a non-negative server_event_seq"),
        (None, "session.event_ack requires a non-negative server_event_seq"),
        (999999, "acknowledged sequence 999999 is newer than journal head 1"),
    ],
)
def test_bad_acks_name_the_problem(seq: object, message: str) -> None:
    journal, _ = make()
    journal.record(ev(0))
    with pytest.raises(AckError, match=message):
        journal.acknowledge(seq)
    assert journal.boundary == 0 and len(journal) == 1


def test_resume_newer_than_head_is_a_conflict() -> None:
    journal, _ = make()
    for n in range(4):
        journal.record(ev(n))
    with pytest.raises(
        JournalConflictError, match="requested sequence 104 is newer than journal head 4"
    ):
        journal.check_replay(104)


def test_ttl_prunes_on_record_and_before_replay() -> None:
    journal, clock = make(ttl_s=10.0)
    journal.record(ev(0))
    clock.now += 5
    journal.record(ev(1))
    clock.now += 6  # entry 1 is 11 s old, entry 2 is 6 s old; nothing pruned yet (lazy)
    assert len(journal) == 2
    assert [e.seq for e in journal.replay_after(1)] == [2]  # pruned before replay
    assert journal.boundary == 1
    with pytest.raises(JournalGapError):
        journal.replay_after(0)
    clock.now += 5
    journal.record(ev(2))  # pruned when recording: entry 2 is 11 s old
    assert journal.boundary == 2 and [e.seq for e in journal.replay_after(2)] == [3]


def test_byte_cap_overflow_stops_journaling_for_good() -> None:
    journal, _ = make()
    size = len(journal.record(ev(0)).frame)  # type: ignore[union-attr]
    capped = Journal(max_bytes=size * 3, ttl_s=60.0)
    assert [capped.record(ev(n)) is not None for n in range(3)] == [True, True, True]
    assert not capped.overflowed
    assert capped.record(ev(3)) is None  # would cross the cap
    assert capped.overflowed
    assert capped.record(ev(4)) is None  # and stays off
    assert capped.head == 3  # no seq was consumed by the refused events
    with pytest.raises(JournalGapError):
        capped.check_replay(3)


def test_exact_fit_is_not_an_overflow() -> None:
    probe, _ = make()
    size = len(probe.record(ev(0)).frame)  # type: ignore[union-attr]
    journal = Journal(max_bytes=size, ttl_s=60.0)
    assert journal.record(ev(0)) is not None
    assert not journal.overflowed


def test_acked_bytes_make_room_again() -> None:
    probe, _ = make()
    size = len(probe.record(ev(0)).frame)  # type: ignore[union-attr]
    journal = Journal(max_bytes=size * 2, ttl_s=60.0)
    journal.record(ev(0))
    journal.record(ev(1))
    journal.acknowledge(2)
    assert journal.retained_bytes == 0
    assert journal.record(ev(2)) is not None and not journal.overflowed


def test_rejects_nonsense_limits() -> None:
    with pytest.raises(ValueError):
        Journal(max_bytes=0, ttl_s=1.0)
    with pytest.raises(ValueError):
        Journal(max_bytes=1, ttl_s=0.0)
