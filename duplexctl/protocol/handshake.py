"""What a handshake's answer means — opening a session and resuming one — decided without I/O.

Why here: :mod:`duplexctl.client.connection` used to decide, inside its receive loops,
which frame ends an open or a resume, how, and whether a failed resume is worth another
attempt. As in websockets, where the sans-I/O protocol decides and the asyncio shell raises
what was decided, those decisions are pure functions of a happening here, and the
connection only waits for frames, keeps time and acts on what they return. Every rule is
tested without a socket (tests/test_client_handshake.py).

The opening ``session.update`` is answered by ``session.created`` (open), an unsequenced
``error`` (refused: by capacity or otherwise, docs/protocol.md §6.2), or something that is
not the protocol at all (:data:`NOT_PROTOCOL`: the open ends at once instead of waiting out
its timeout). A ``session.resume`` is answered by ``session.resumed``, ``session.
resync_required``, an unsequenced ``error`` (fatal when its code says the session is gone:
``names.FATAL_RESUME_CODES``), or the session's end (expired, closed, replaced: fatal).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from duplexctl.protocol import names
from duplexctl.protocol.client_state import (
    ClientSession,
    ErrorReceived,
    Happening,
    ResyncRequired,
    SessionClosed,
    SessionCreated,
    SessionExpired,
    SessionReplaced,
    SessionResumed,
    ViolationRecorded,
)

#: Violations that mean "this is not the protocol at all": during a handshake they end it at
#: once (cause ``garbage``) instead of waiting out the timeout.
NOT_PROTOCOL: Final = frozenset({"binary_frame", "not_json", "not_object", "malformed_event"})


class OpenAnswer(enum.Enum):
    """How the server answered the opening ``session.update``."""

    CREATED = "created"
    REFUSED = "refused"  # an unsequenced error: the happening is its ErrorReceived
    GARBAGE = "garbage"  # a frame that is not the protocol: the happening is its violation


def open_answer(h: Happening) -> OpenAnswer | None:
    """What ``h`` says about an open in progress; None: keep waiting."""
    if isinstance(h, SessionCreated):
        return OpenAnswer.CREATED
    if isinstance(h, ErrorReceived) and h.seq is None:
        return OpenAnswer.REFUSED
    if isinstance(h, ViolationRecorded) and h.violation.name in NOT_PROTOCOL:
        return OpenAnswer.GARBAGE
    return None


@dataclass(frozen=True, slots=True)
class ResumeAnswer:
    """How one resume attempt ended: ``outcome`` is what its record says
    (docs/metrics.md "Resume": outcome), ``fatal`` that another attempt cannot
    help."""

    outcome: str
    fatal: bool

    @property
    def resumed(self) -> bool:
        return self.outcome == RESUMED.outcome


RESUMED: Final = ResumeAnswer("resumed", fatal=False)
#: no answer within the resume's timeout: the server may be busy, try again
RESUME_TIMED_OUT: Final = ResumeAnswer("timeout", fatal=False)
#: the socket closed during the attempt (the upgrade's answer included): try again
RESUME_TRANSPORT_ERROR: Final = ResumeAnswer("transport_error", fatal=False)
#: frames that are not the protocol: perhaps a proxy in a bad moment, try again
RESUME_GARBAGE: Final = ResumeAnswer("garbage", fatal=False)
#: the server cannot replay what this client missed
RESUME_RESYNC: Final = ResumeAnswer("resync_required", fatal=True)


def resume_answer(h: Happening) -> ResumeAnswer | None:
    """What ``h`` says about a resume attempt in progress; None: keep waiting."""
    if isinstance(h, SessionResumed):
        return RESUMED
    if isinstance(h, ResyncRequired):
        return RESUME_RESYNC
    if isinstance(h, ErrorReceived) and h.seq is None:
        return ResumeAnswer(h.error.code, fatal=h.error.code in names.FATAL_RESUME_CODES)
    if isinstance(h, (SessionExpired, SessionClosed, SessionReplaced)):
        return ResumeAnswer(h.type, fatal=True)
    if isinstance(h, ViolationRecorded) and h.violation.name in NOT_PROTOCOL:
        return RESUME_GARBAGE
    return None


def resume_blocked(session: ClientSession) -> ResumeAnswer | None:
    """Why no resume may be attempted for ``session`` (fatal), or None when one may."""
    if session.can_resume:
        return None
    outcome = "resync_required" if session.resync_reason else "not_resumable"
    return ResumeAnswer(outcome, fatal=True)
