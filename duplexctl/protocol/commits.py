"""Client commits across a drop: which ones the server never received, decided once (issue
31.4; docs/protocol.md §6.6 "A commit in flight at a drop").

What vLLM-Omni 0.30.0 does (recorded: tests/fixtures/wire/commit_at_drop.jsonl): a commit that
reached the server before the connection dropped is processed, its fan-out and answer are
journaled and replayed after ``session.resume``; a commit written into a connection that was
already gone is lost without a trace — the resumed session shows no commit
(``turn_state`` ``user_speaking``), nothing of it is replayed, and a commit sent again on the
new connection commits the audio the server kept and is answered.

So after a drop the client cannot know which of its unconfirmed commits arrived until it has
seen everything the server produced before the resume: it sends ``session.heartbeat`` right
after ``session.resumed`` — answered by a sequenced ``session.heartbeat_ack`` that the server
emits after the replay and after any commit it had received (one mailbox, in order,
§6.9) — and at that ack, a commit still without its ``input_audio_buffer.committed`` or an
error echoing it never reached the server: it is sent again, once. (The shell sends no other
heartbeat while it uses the ledger, so every ack after a resume is a barrier's.) If the
commit sent again is refused (the audio was lost with it), or no resume shows the answer, the
turn is **lost at the drop** (the code ``lost_at_drop``, not ``no_response``): the server
never had it, so it cannot be said not to have answered.

:class:`CommitLedger` decides all of it and does no I/O: the shell (replay's listener, the
microphone) tells it what was sent and what was received and sends what it returns. It is
used where the client alone ends turns (``turn_detection`` none): with server VAD a
``committed`` may be the server's own and cannot be paired with the client's commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from duplexctl.protocol.client_state import (
    ClientSession,
    Committed,
    ErrorReceived,
    Happening,
    HeartbeatAck,
)

#: the error code of a turn whose commit never reached the server (report.json ``errors``)
LOST_AT_DROP: Final = "lost_at_drop"

K = TypeVar("K")
Event = dict[str, Any]


@dataclass(slots=True, eq=False)
class Pending(Generic[K]):
    """One commit the server has not confirmed yet."""

    key: K  # the shell's handle on it (replay: the turn)
    event_id: str | None
    response_create: bool
    resent: bool = False  # sent again after a resume showed it never arrived
    in_doubt: bool = False  # sent on a connection that dropped before its confirmation


@dataclass(slots=True)
class Verdicts(Generic[K]):
    """What the ledger decided on one happening: commits to send again (key, and whether it
    asked for an answer: the shell sends a new commit alike and calls
    :meth:`CommitLedger.resent`), turns lost at the drop, and the barrier heartbeat to send now
    (``None``: nothing)."""

    resend: list[tuple[K, bool]] = field(default_factory=list)
    lost: list[tuple[K, str]] = field(default_factory=list)
    barrier: Event | None = None
    #: the error answers a commit sent again whose first one had arrived after all: the
    #: client's own duplicate, no news about any turn (the shell does not count it)
    duplicate: bool = False


class CommitLedger(Generic[K]):
    """The client's commits the server has not confirmed (see the module docstring)."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self._pending: list[Pending[K]] = []
        self._barriers_sent = 0
        self._acks_seen = 0
        self._barrier_at: int | None = None  # the ack count that completes the barrier
        self._duplicates: set[str] = set()  # re-sent commits whose first one arrived
        self.resent_count = 0
        self.lost_count = 0

    # -- what the shell did ------------------------------------------------------------------

    def sent(self, key: K, event: Event) -> None:
        """A commit went out (or is queued for the next socket): every commit, since each
        gets its own ``committed`` (or error) in the order sent."""
        event_id = event.get("event_id")
        self._pending.append(
            Pending(
                key,
                event_id if isinstance(event_id, str) else None,
                bool(event.get("response_create")),
            )
        )

    def resent(self, key: K, event: Event) -> None:
        """The shell sent ``key``'s commit again (``event``, a new one)."""
        for p in self._pending:
            if p.key is key:
                event_id = event.get("event_id")
                p.event_id = event_id if isinstance(event_id, str) else None
                p.resent, p.in_doubt = True, False
                self.resent_count += 1
                return

    def forget(self, key: K) -> None:
        """``key`` is over for another reason (answered, given up on)."""
        self._pending = [p for p in self._pending if p.key is not key]

    # -- what the client learned -------------------------------------------------------------

    def dropped(self) -> None:
        """The socket went away: every unconfirmed commit is in doubt until the resume says."""
        for p in self._pending:
            p.in_doubt = True

    def resumed(self) -> Verdicts[K]:
        """``session.resumed`` arrived: with commits in doubt, the barrier heartbeat is owed."""
        verdicts: Verdicts[K] = Verdicts()
        if any(p.in_doubt for p in self._pending):
            # barriers sent on connections that dropped are forgotten: their acks, replayed
            # or lost, were all sent after the commits in doubt, so the next ack (theirs or
            # the new one's) is a barrier for those commits as well
            self._acks_seen = self._barriers_sent
            self._barriers_sent += 1
            self._barrier_at = self._barriers_sent
            verdicts.barrier = self.session.heartbeat()
        return verdicts

    def on_happening(self, h: Happening) -> Verdicts[K]:
        """One received happening: confirmations, refusals and the barrier's ack."""
        verdicts: Verdicts[K] = Verdicts()
        if isinstance(h, Committed):
            if self._pending:  # each commit is confirmed by its own, in the order sent
                first = self._pending.pop(0)
                if first.resent and first.event_id is not None:
                    self._duplicates.add(first.event_id)
        elif isinstance(h, ErrorReceived):
            echo = h.error.client_event_id
            if echo is not None and echo in self._duplicates:
                self._duplicates.discard(echo)
                verdicts.duplicate = True
                return verdicts
            for p in self._pending:
                if echo is not None and p.event_id == echo:
                    self._pending.remove(p)
                    if p.resent:  # the commit sent again was refused: the audio is gone too
                        self.lost_count += 1
                        verdicts.lost.append(
                            (p.key, f"sent again after the resume, it was refused: {h.error.code}")
                        )
                    break
        elif isinstance(h, HeartbeatAck):
            self._acks_seen += 1
            if self._barrier_at is not None and self._acks_seen >= self._barrier_at:
                self._barrier_at = None
                verdicts.resend = [
                    (p.key, p.response_create) for p in self._pending if p.in_doubt and not p.resent
                ]
        return verdicts

    def lost_reason(self, key: K) -> str | None:
        """Why an unanswered ``key`` is lost at the drop rather than unanswered, or None: its
        commit went out on a connection that dropped and the server never confirmed it."""
        for p in self._pending:
            if p.key is key and (p.in_doubt or p.resent):
                if p.resent:
                    return "its commit never reached the server; sent again, it got no answer"
                return "its commit went out as the connection dropped and never reached the server"
        return None
