"""What the client owes the server while a reply plays, decided once (docs/protocol.md §6.5, §6.6).

A duplex client owes the server three kinds of events that no user action triggers:

* ``playback.ack`` — the position the listener has *heard* of each reply: 0 as soon as the
  reply's first audio arrives (it pins the reply's history position ahead of later user
  input), then every ~200 ms played, and a final exact one when everything has played
  (``committed_ms`` ≥ the audio sent is what commits the reply to history and releases the
  server's playback record, so the final one is rounded *up*);
* after an interruption, the heard position: a ``playback.ack`` at it while the reply is still
  running (the server cuts history at the last acknowledged position when it cancels), then
  ``conversation.item.truncate`` at it once the reply has ended (§7.3, §7.4);
* ``session.event_ack`` for the sequenced events processed, so the server's replay journal
  stays trimmed (§6.6).

Like the websockets library's sans-I/O protocol objects, which decide every frame and leave
the asyncio shell only the writing, :class:`PlaybackDuty` decides all of it and does no I/O:
it is fed what the client learned — a reply started playing (with the object that tells its
playback position: the simulated :class:`~duplexctl.audio.playback.PlaybackClock` or a real
speaker), an interruption with the heard position, and, through the
:class:`~duplexctl.protocol.client_state.ClientSession` it reads, every received happening
(``response.done``, the audio received, the capabilities) — and :meth:`PlaybackDuty.due`
returns the events to send *now*. ``replay``, ``load`` (headless replay) and ``talk`` all
send exactly what it returns, so they cannot disagree again.

Decisions where the shells used to differ (protocol §3.3, §3.5, §6.5):

* **Capabilities decide what is owed, one rule for all**: no ``playback.ack`` when the server
  says ``supports_playback_ack: false``, no truncate when it says
  ``supports_audio_truncate: false``; a capability that is not announced is assumed (vLLM-Omni
  0.30 does not gate either, and G1 servers announce neither).
* **Item ids are built one way**: the assistant item of a reply is always
  ``item_<response_id>`` (``ids.assistant_item_id``), the only id the server accepts.
* **The heard position is acknowledged before a client cancel goes out** (what ``talk`` did,
  not ``replay``): only while the reply is still running, since after its ``response.done``
  the truncate says the same thing and the server may already have released the record.
* **The final ack is exact and rounded up**: ``ceil`` of the larger of the played position and
  the audio the server stated it sent (a speaker's position can fall a rounding short of it).

Per-call cost matters: ``load`` calls :meth:`PlaybackDuty.due` after every append of hundreds
of sessions, so with nothing playing it is one comparison and returns a shared empty tuple.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Protocol

from duplexctl.protocol import ids
from duplexctl.protocol.client_state import ClientSession

#: playback.ack cadence while a reply plays, in ms *played* (docs/protocol.md §6.5: ≈200–250 ms).
ACK_EVERY_MS: Final = 200.0
#: session.event_ack at most this often (s) while events arrive (docs/protocol.md §6.6) ...
EVENT_ACK_EVERY_S: Final = 0.25
#: ... or as soon as this many sequenced events are unacknowledged (None: time only).
EVENT_ACK_BATCH: Final = 32
# a timer loop that sleeps exactly ``every_s`` may wake a hair early: not worth a skipped ack
_TIMER_SLACK_S: Final = 0.001

Event = dict[str, Any]
NOTHING: Final[tuple[Event, ...]] = ()


class Position(Protocol):
    """What the duty reads of one reply's playback (PlaybackClock, or a speaker adapter)."""

    def played_ms(self, now: float) -> float:
        """Reply audio heard by ``now`` (s, monotonic)."""

    def end_time(self) -> float | None:
        """When everything received has played (None: not known yet)."""


class EventAckDuty:
    """When a ``session.event_ack`` is owed: something processed is unacknowledged and the
    interval has passed since the last check, or ``batch`` events are waiting."""

    __slots__ = ("_acked_before", "batch", "every_s", "next_at", "session")

    def __init__(
        self,
        session: ClientSession,
        *,
        every_s: float = EVENT_ACK_EVERY_S,
        batch: int | None = EVENT_ACK_BATCH,
    ) -> None:
        self.session = session
        self.every_s = every_s
        self.batch = batch
        self.next_at = 0.0  # the next timed check (read by PlaybackDuty.due's fast path)
        self._acked_before = 0

    def due(self, now: float) -> Event | None:
        cs = self.session
        if now < self.next_at and (self.batch is None or cs.last_seq - cs.acked_seq < self.batch):
            return None
        self.next_at = now + self.every_s - _TIMER_SLACK_S
        seq = cs.pending_ack()
        if seq is None:
            return None
        self._acked_before = cs.acked_seq
        cs.mark_acked(seq)
        return cs.event_ack(seq)

    def unsent(self) -> None:
        """The last event ack never left (no socket): it is owed again."""
        self.session.acked_seq = min(self.session.acked_seq, self._acked_before)


@dataclass(slots=True, eq=False)
class _Ledger:
    """What the client has told the server about one reply."""

    response_id: str
    position: Position
    acked_ms: float | None = None  # the last played_ms acknowledged (None: not even 0 yet)
    acked_before: float | None = None  # acked_ms before the last ack (undone if it failed)
    final: bool = False  # everything played: the final ack is out
    told_played_out: bool = False
    heard_ms: float | None = None  # interrupted: the frozen heard position
    heard_ack_owed: bool = False


class PlaybackDuty:
    """Every event the client owes the server as replies play (see the module docstring).

    ``session`` is the protocol state the shell feeds with received frames; the duty reads
    its responses (done, audio sent) and capabilities. ``event_ack_every_s`` /
    ``event_ack_batch`` set the journal-ack cadence (``None`` every: the shell sends no
    event acks through this duty).
    """

    def __init__(
        self,
        session: ClientSession,
        *,
        ack_every_ms: float = ACK_EVERY_MS,
        event_ack_every_s: float | None = EVENT_ACK_EVERY_S,
        event_ack_batch: int | None = EVENT_ACK_BATCH,
    ) -> None:
        self.session = session
        self.ack_every_ms = ack_every_ms
        self.event_acks = (
            EventAckDuty(session, every_s=event_ack_every_s, batch=event_ack_batch)
            if event_ack_every_s is not None
            else None
        )
        self._ledgers: dict[str, _Ledger] = {}
        self._live: dict[str, _Ledger] = {}  # ledgers that may still owe something
        #: replies that have played out entirely since the shell last looked (it clears it)
        self.played_out: list[str] = []

    # -- what the client learned -------------------------------------------------------------

    def playing(self, response_id: str, position: Position) -> None:
        """The reply's first audio arrived; ``position`` tells how much of it has played.
        Owes the first ``playback.ack`` (0) at once."""
        if response_id not in self._ledgers:
            ledger = _Ledger(response_id, position)
            self._ledgers[response_id] = self._live[response_id] = ledger

    def interrupted(self, response_id: str, heard_ms: float) -> None:
        """Playback of the reply stopped at ``heard_ms`` (flush: barge-in, cancel, a server
        stop signal). Owes the heard position, once; nothing if it had already played out."""
        ledger = self._ledgers.get(response_id)
        if ledger is None or ledger.final or ledger.heard_ms is not None:
            return
        ledger.heard_ms = heard_ms
        ledger.heard_ack_owed = True
        self._live[response_id] = ledger

    def resumed(self, session: dict[str, Any]) -> None:
        """``session.resumed``'s session object arrived: its ``playback`` is what the server
        has of the latest reply. When that says less is committed than the final ack this
        client sent for it, the ack was lost with the connection (written into a socket that
        was already gone), and without it the reply owns the turn on the server for good —
        the next commit is refused (wire/commit_at_drop.jsonl): the final ack is owed again.
        The server's playback is its latest reply's: only the client's latest reply is
        considered, and only when the audio lengths agree (``generated_ms``)."""
        playback = session.get("playback")
        active = session.get("active_response_id")
        cs = self.session
        if not isinstance(playback, dict) or not cs.responses:
            return
        committed, generated = playback.get("committed_ms"), playback.get("generated_ms")
        if not isinstance(committed, int | float) or not isinstance(generated, int | float):
            return
        rid = next(reversed(cs.responses))
        ledger, track = self._ledgers.get(rid), cs.responses[rid]
        if ledger is None or active not in (None, rid) or abs(track.audio_ms - generated) > 1.0:
            return
        if ledger.final and ledger.heard_ms is None and committed < math.floor(track.audio_ms):
            ledger.final = False  # owed again: due() sends it at once (played out, done)
            self._live[rid] = ledger

    def is_live(self, response_id: str) -> bool:
        """Whether the duty may still owe something for this reply."""
        return response_id in self._live

    # -- what is owed ------------------------------------------------------------------------

    def due(self, now: float) -> tuple[Event, ...] | list[Event]:
        """The events owed at ``now`` (s, monotonic), in the order to send them."""
        out: list[Event] | None = None
        if self._live:
            out = self._playback(now)
        acks = self.event_acks
        # the common case (nothing playing, the journal ack not yet due) is two comparisons
        if acks is not None and (now >= acks.next_at or acks.batch is not None):
            ack = acks.due(now)
            if ack is not None:
                if out is None:
                    return [ack]
                out.append(ack)
        return out if out else NOTHING

    def _playback(self, now: float) -> list[Event]:
        cs = self.session
        caps = cs.capabilities
        acks = caps.get("supports_playback_ack") is not False
        truncates = caps.get("supports_audio_truncate") is not False
        out: list[Event] = []
        for rid, ledger in list(self._live.items()):
            track = cs.responses.get(rid)
            done = track is not None and track.done
            if ledger.heard_ms is not None:  # interrupted
                if ledger.heard_ack_owed:
                    ledger.heard_ack_owed = False
                    if acks and not done:
                        out.append(cs.playback_ack(rid, ledger.heard_ms))
                if done:
                    del self._live[rid]
                    if truncates and track is not None and track.audio_ms > 0:
                        item = ids.assistant_item_id(rid)
                        out.append(cs.item_truncate(item, ledger.heard_ms))
                continue
            first = ledger.acked_ms is None
            if first:
                ledger.acked_ms = 0.0
                if acks:
                    out.append(cs.playback_ack(rid, 0.0))
            position = ledger.position
            played = position.played_ms(now)
            end = position.end_time()
            if done and end is not None and now >= end:
                assert track is not None
                ledger.final = True
                del self._live[rid]
                if not ledger.told_played_out:
                    ledger.told_played_out = True
                    self.played_out.append(rid)
                if acks:
                    out.append(cs.playback_ack(rid, math.ceil(max(played, track.audio_ms))))
            elif acks and not first and played - ledger.acked_ms >= self.ack_every_ms:  # type: ignore[operator]
                ledger.acked_before, ledger.acked_ms = ledger.acked_ms, played
                out.append(cs.playback_ack(rid, played))
        return out

    def unsent(self, event: Event) -> None:
        """``event`` (one :meth:`due` returned) could not be sent (no socket): what it said is
        owed again — the journal ack, a periodic ack's position, the final ack. A heard
        position and a truncate are not retried: the interruption they follow failed too."""
        etype = event.get("type")
        if etype == "session.event_ack":
            if self.event_acks is not None:
                self.event_acks.unsent()
            return
        if etype != "playback.ack":
            return
        ledger = self._ledgers.get(event.get("response_id") or "")
        if ledger is None or ledger.heard_ms is not None:
            return
        if ledger.final:
            ledger.final = False
            self._live[ledger.response_id] = ledger
        elif ledger.acked_ms == 0.0 and ledger.acked_before is None:
            ledger.acked_ms = None
        else:
            ledger.acked_ms = ledger.acked_before
