"""Per-session replay journal: sequence numbers, TTL, byte cap, acknowledgements.

Pure (no I/O, injectable clock) so its rules are unit-tested without sockets. The rules are
those of vLLM-Omni 0.30.0 (docs/protocol.md §6.6):

* every journaled event is stamped ``server_event_seq`` = 1, 2, 3, … and kept as the exact
  compact JSON that goes on the wire, so a replay resends byte-identical frames (original
  seq and ``event_id``);
* entries older than the TTL are pruned when an event is recorded and before a replay (an idle
  journal is therefore only pruned lazily, as on the real server);
* the byte cap counts the compact JSON including the seq; the event that would cross it is
  *not* journaled, the journal is marked overflowed for good and the caller sends live events
  without seq from then on (any later resume is a gap);
* ``session.event_ack`` trims everything at or below the acknowledged seq;
* the "retained boundary" is the highest seq acknowledged or pruned: a resume below it cannot
  be served without a gap, a resume exactly at it can.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from duplexctl.protocol import codec


class JournalGapError(Exception):
    """Replay from the requested seq is impossible (acked/pruned past it, or overflowed)."""


class JournalConflictError(Exception):
    """The requested seq is newer than anything the journal ever stamped."""


class AckError(ValueError):
    """A ``session.event_ack`` the journal cannot accept; the message goes on the wire."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    seq: int
    recorded_at: float
    frame: bytes  # compact UTF-8 JSON including server_event_seq: what is sent and replayed


class Journal:
    """The replay journal of one session."""

    def __init__(
        self,
        *,
        max_bytes: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_bytes <= 0 or ttl_s <= 0:
            raise ValueError("journal max_bytes and ttl_s must be positive")
        self._max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: deque[JournalEntry] = deque()
        self._head = 0
        self._boundary = 0
        self._bytes = 0
        self._overflowed = False

    @property
    def head(self) -> int:
        """The last seq stamped (0 before the first event)."""
        return self._head

    @property
    def boundary(self) -> int:
        """The highest seq acknowledged or pruned (the retained boundary)."""
        return self._boundary

    @property
    def overflowed(self) -> bool:
        return self._overflowed

    @property
    def retained_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, event: dict[str, Any]) -> JournalEntry | None:
        """Stamp and retain ``event``; None once the byte cap was crossed (now or earlier).

        The caller learns about the first overflow by comparing ``overflowed`` before and
        after, because that is the moment it must send ``session.resync_required``.
        """
        if self._overflowed:
            return None
        self.prune()
        seq = self._head + 1
        frame = codec.dumps_bytes({**event, "server_event_seq": seq})
        if self._bytes + len(frame) > self._max_bytes:
            self._overflowed = True
            self._entries.clear()
            self._bytes = 0
            return None
        entry = JournalEntry(seq, self._clock(), frame)
        self._entries.append(entry)
        self._bytes += len(frame)
        self._head = seq
        return entry

    def acknowledge(self, seq: object) -> None:
        """Apply ``session.event_ack``; raises AckError with the wire message."""
        # like vLLM-Omni, a JSON true/false passes as the int 1/0 (Python bool is an int)
        if not isinstance(seq, int) or seq < 0:
            raise AckError("session.event_ack requires a non-negative server_event_seq")
        if seq > self._head:
            raise AckError(f"acknowledged sequence {seq} is newer than journal head {self._head}")
        self._drop_through(seq)
        self._boundary = max(self._boundary, seq)

    def prune(self) -> None:
        """Drop entries older than the TTL (they move the retained boundary)."""
        cutoff = self._clock() - self._ttl_s
        while self._entries and self._entries[0].recorded_at <= cutoff:
            entry = self._entries.popleft()
            self._bytes -= len(entry.frame)
            self._boundary = max(self._boundary, entry.seq)

    def check_replay(self, after: int) -> None:
        """Raise unless a replay of every seq > ``after`` is possible right now."""
        self.prune()
        if self._overflowed:
            raise JournalGapError("journal overflowed; replay is incomplete")
        if after < self._boundary:
            raise JournalGapError(
                f"requested sequence {after} is older than retained journal boundary "
                f"{self._boundary}"
            )
        if after > self._head:
            raise JournalConflictError(
                f"requested sequence {after} is newer than journal head {self._head}"
            )

    def replay_after(self, after: int) -> list[JournalEntry]:
        """Every retained entry with seq > ``after``, in order (checks first)."""
        self.check_replay(after)
        return [entry for entry in self._entries if entry.seq > after]

    def _drop_through(self, seq: int) -> None:
        while self._entries and self._entries[0].seq <= seq:
            self._bytes -= len(self._entries.popleft().frame)
