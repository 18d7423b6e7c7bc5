"""The client session's lifecycle (protocol/lifecycle.py) and the connection's attachment
(client/attachment.py): every transition, sans I/O.

The table is checked against what each phase must allow (may resume? ended? is a duplicate
seq a replay?), and each transition is driven through :class:`ClientSession` by the frames
that cause it, as a transport delivers them."""

from __future__ import annotations

from typing import Any

import pytest

from duplexctl.client.attachment import Attachment, Move, after
from duplexctl.protocol.client_state import ClientSession
from duplexctl.protocol.lifecycle import (
    ENDED,
    NOT_RESUMABLE,
    TRANSITIONS,
    Phase,
    Signal,
    next_phase,
)

SID = "duplex-" + "b" * 32


class Wire:
    """Feeds frames to one ClientSession, numbering the sequenced ones."""

    def __init__(self, cs: ClientSession | None = None) -> None:
        self.cs = cs or ClientSession()
        self.seq = self.cs.last_seq
        self.t = 0

    def __call__(self, etype: str, *, seq: bool | int = True, **fields: Any) -> None:
        frame: dict[str, Any] = {"type": etype, **fields}
        if seq is True:
            self.seq += 1
            frame["server_event_seq"] = self.seq
        elif not isinstance(seq, bool):
            frame["server_event_seq"] = seq
        self.t += 1_000_000
        self.cs.on_frame(frame, self.t)

    def open(self) -> Wire:
        self.cs.begin_connection()
        self("session.created", seq=False, session={"id": SID}, resume_token="tok")
        self("session.updated", session={"id": SID})
        return self

    def violations(self) -> list[str]:
        return [v.name for v in self.cs.checker.violations]


# --- the table ------------------------------------------------------------------------------


def test_the_ended_phases_are_final() -> None:
    for phase in ENDED:
        assert all(next_phase(phase, s) is phase for s in Signal), phase


def test_every_phase_is_reachable_from_opening() -> None:
    seen, frontier = {Phase.OPENING}, [Phase.OPENING]
    while frontier:
        phase = frontier.pop()
        for signal in Signal:
            after = next_phase(phase, signal)
            if after not in seen:
                seen.add(after)
                frontier.append(after)
    assert seen == set(Phase)


def test_only_a_live_session_may_resume_and_a_detached_one_can_still_end() -> None:
    assert {Phase.REPLACED, Phase.RESYNC_REQUIRED, Phase.CLOSED, Phase.EXPIRED} == NOT_RESUMABLE
    for phase in (Phase.REPLACED, Phase.RESYNC_REQUIRED):
        assert next_phase(phase, Signal.CLOSED) is Phase.CLOSED
        assert next_phase(phase, Signal.EXPIRED) is Phase.EXPIRED
        assert next_phase(phase, Signal.CREATED) is phase  # no way back to a live phase
        assert next_phase(phase, Signal.CONNECTION) is phase
    assert next_phase(Phase.RESYNC_REQUIRED, Signal.REPLACED) is Phase.REPLACED
    assert next_phase(Phase.REPLACED, Signal.RESYNC) is Phase.REPLACED


def test_a_new_seq_moves_only_a_replaying_session() -> None:
    """ClientSession skips the lookup for a new seq outside REPLAYING (once per frame)."""
    assert [p for (p, s) in TRANSITIONS if s is Signal.NEW_SEQ] == [Phase.REPLAYING]


def test_the_table_lists_only_changes() -> None:
    """A row that maps a phase to itself would be a second way of saying "unchanged"."""
    assert all(after is not phase for (phase, _), after in TRANSITIONS.items())


# --- each transition, driven by the frames that cause it --------------------------------------


def test_opening_becomes_open_at_session_created() -> None:
    wire = Wire()
    wire.cs.begin_connection()  # the first socket: nothing to replay
    assert wire.cs.phase is Phase.OPENING and not wire.cs.created and not wire.cs.can_resume
    wire("session.created", seq=False, session={"id": SID}, resume_token="tok")
    assert wire.cs.phase is Phase.OPEN and wire.cs.created and wire.cs.can_resume


def test_a_resumes_connection_replays_until_its_first_new_seq() -> None:
    wire = Wire().open()
    wire.cs.begin_connection()  # the resume's socket
    assert wire.cs.phase is Phase.REPLAYING
    wire("session.resumed", seq=False, session={"id": SID}, session_id=SID, resume_token="tok2")
    # the journal again, below what was processed: quietly dropped
    wire("session.updated", seq=1, session={"id": SID})
    assert wire.cs.phase is Phase.REPLAYING and wire.cs.duplicates_dropped == 1
    assert wire.violations() == []
    wire("session.heartbeat_ack")  # a new seq: the replay is over
    assert wire.cs.phase is Phase.OPEN
    wire("session.heartbeat_ack", seq=1)  # the same overlap now is a fault
    assert wire.violations() == ["seq_out_of_order"]


def test_a_session_resumed_from_elsewhere_replays_on_its_first_socket() -> None:
    cs = ClientSession.resuming(SID, "tok", 7)
    assert cs.phase is Phase.OPEN and cs.can_resume
    cs.begin_connection()
    assert cs.phase is Phase.REPLAYING


@pytest.mark.parametrize(
    ("etype", "fields", "phase", "ended"),
    [
        ("session.closed", {"reason": "client_close"}, Phase.CLOSED, True),
        ("session.expired", {"reason": "lease"}, Phase.EXPIRED, True),
        ("session.replaced", {"attachment_generation": 2}, Phase.REPLACED, False),
        ("session.resync_required", {"reason": "journal_gap"}, Phase.RESYNC_REQUIRED, False),
    ],
)
def test_the_server_ends_or_detaches_an_open_session(
    etype: str, fields: dict[str, Any], phase: Phase, ended: bool
) -> None:
    wire = Wire().open()
    wire(etype, **fields)
    cs = wire.cs
    assert cs.phase is phase and cs.ended is ended and not cs.can_resume
    assert (cs.closed, cs.replaced) == (phase is Phase.CLOSED, phase is Phase.REPLACED)
    if phase is Phase.RESYNC_REQUIRED:
        assert cs.resync_reason == "journal_gap"
    assert cs.pending_ack() is (None if ended else wire.seq)  # nothing to trim once ended


def test_a_detached_session_still_ends_when_the_server_closes_it() -> None:
    wire = Wire().open()
    wire("session.resync_required", reason="journal_gap")
    wire("session.replaced")
    assert wire.cs.phase is Phase.REPLACED
    wire("session.closed", reason="replaced")
    assert wire.cs.phase is Phase.CLOSED and wire.cs.ended


def test_after_session_closed_nothing_moves_it_and_the_checker_says_why() -> None:
    wire = Wire().open()
    wire("session.closed", reason="client_close")
    wire("session.expired", reason="lease")
    wire("session.created", seq=False, session={"id": SID})
    assert wire.cs.phase is Phase.CLOSED and wire.cs.close_reason == "client_close"
    assert "event_after_session_closed" in wire.violations()


# --- the connection's attachment (client/attachment.py) ---------------------------------------


def test_a_release_is_final_and_a_close_is_never_undone() -> None:
    assert all(after(Attachment.RELEASED, m) is Attachment.RELEASED for m in Move)
    for move in (Move.DROP, Move.LOSE, Move.RESUMED, Move.CLOSE):
        assert after(Attachment.CLOSING, move) is Attachment.CLOSING
    assert after(Attachment.CLOSING, Move.RELEASE) is Attachment.RELEASED


def test_a_drop_holds_the_connection_until_a_resume_or_a_loss() -> None:
    held = after(Attachment.ATTACHED, Move.DROP)
    assert held is Attachment.HELD
    assert after(held, Move.RESUMED) is Attachment.ATTACHED
    assert after(held, Move.LOSE) is Attachment.ATTACHED  # drop(auto_resume=True)
    assert after(held, Move.CLOSE) is Attachment.CLOSING
    assert after(Attachment.ATTACHED, Move.RESUMED) is Attachment.ATTACHED
