"""The client session's lifecycle: one phase, every transition in one table.

Why a table: the lifecycle was six flags on :class:`~duplexctl.protocol.client_state.
ClientSession` (``created``, ``closed``, ``expired``, ``replaced``, a resync reason and a
"this connection is replaying the journal" flag), each set by its own handler, and every
question about them ("may we resume?", "is a duplicate seq a replay or a fault?") was a
boolean expression over the six. As in h11, where every state and transition of a
connection is one table, the phase here is one value and :data:`TRANSITIONS` says what each
signal does to it; a pair the table does not list leaves the phase as it is (the signal
arrived where it means nothing new: a second ``session.created``, a ``session.expired``
after ``session.closed`` — the invariant checker records those as protocol violations).

Terminal phases: ``CLOSED`` and ``EXPIRED`` end the session (nothing moves them);
``REPLACED`` (another connection took the session over) and ``RESYNC_REQUIRED`` (the server
cannot replay what this client missed) leave it alive on the server but not resumable by
this client, and still end in ``session.closed`` / ``session.expired`` when the server says
so. docs/protocol.md §6 describes the server side of each signal.
"""

from __future__ import annotations

import enum


class Phase(enum.Enum):
    """Where a client's session stands."""

    OPENING = "opening"  # no session.created (or session.resumed) yet
    OPEN = "open"
    # a resume's connection before its first new server_event_seq: a seq at or below the
    # last one processed is the journal replaying (dropped quietly), not a fault
    REPLAYING = "replaying"
    REPLACED = "replaced"  # session.replaced: another connection holds the session
    RESYNC_REQUIRED = "resync_required"  # the server cannot replay what was missed
    CLOSED = "closed"  # session.closed
    EXPIRED = "expired"  # session.expired


class Signal(enum.Enum):
    """What moves the phase: a server event, or the transport opening a socket."""

    CREATED = "session.created"
    RESUMED = "session.resumed"
    CONNECTION = "connection"  # the transport opened a socket for the session (first or resume)
    NEW_SEQ = "new seq"  # a server_event_seq above the last one processed
    REPLACED = "session.replaced"
    RESYNC = "session.resync_required"
    CLOSED = "session.closed"
    EXPIRED = "session.expired"


_LIVE = (Phase.OPENING, Phase.OPEN, Phase.REPLAYING)
_DETACHED = (Phase.REPLACED, Phase.RESYNC_REQUIRED)

#: (phase, signal) -> the next phase. A pair not listed leaves the phase unchanged.
TRANSITIONS: dict[tuple[Phase, Signal], Phase] = {
    (Phase.OPENING, Signal.CREATED): Phase.OPEN,
    (Phase.OPENING, Signal.RESUMED): Phase.OPEN,
    (Phase.OPEN, Signal.CONNECTION): Phase.REPLAYING,  # a resume's socket
    (Phase.REPLAYING, Signal.NEW_SEQ): Phase.OPEN,
    **{(p, Signal.REPLACED): Phase.REPLACED for p in (*_LIVE, Phase.RESYNC_REQUIRED)},
    **{(p, Signal.RESYNC): Phase.RESYNC_REQUIRED for p in _LIVE},
    **{(p, Signal.CLOSED): Phase.CLOSED for p in (*_LIVE, *_DETACHED)},
    **{(p, Signal.EXPIRED): Phase.EXPIRED for p in (*_LIVE, *_DETACHED)},
}

#: the phases in which the session is over on the server
ENDED = frozenset({Phase.CLOSED, Phase.EXPIRED})
#: the phases from which this client may not resume
NOT_RESUMABLE = frozenset({*ENDED, *_DETACHED})


def next_phase(phase: Phase, signal: Signal) -> Phase:
    """The phase after ``signal`` (:data:`TRANSITIONS`; unchanged where it lists nothing)."""
    return TRANSITIONS.get((phase, signal), phase)
