"""The protocol invariants of docs/metrics.md, checked on what a client receives.

A violation is a server bug (or a transport that lost or duplicated events), so it is
recorded as a structured :class:`Violation` and counted — never raised, never silently
ignored: a load run must keep going and report how often the server broke its contract.

Checked, in the order docs/metrics.md lists them:

* ``response_done_missing`` is *not* a violation by itself: a ``session.close`` cancels a
  running response without a ``response.done`` (docs/protocol.md §6.8). Responses still open are
  reported by :meth:`InvariantChecker.finish` / ``open_at_close`` so a probe can judge them.
  ``duplicate_response_done`` and ``response_done_without_created`` are violations.
* ``delta_after_response_done``: an audio/transcript/text delta for a finished response.
* ``old_epoch_delta``: a delta whose epoch is below an epoch the session already announced.
* ``seq_gap``: ``server_event_seq`` not exactly the previous processed seq + 1 (duplicates of
  a replay are dropped by ClientSession before they get here; a resume continues the count).
* ``event_before_session_created``: anything but an unsequenced error/resync notice before
  ``session.created`` (vLLM-Omni 0.30.0 may send a ``bad_event`` for a typeless first frame
  before it — allowed). ``duplicate_session_created`` likewise.
* ``event_after_session_closed`` / ``duplicate_session_closed``: ``session.closed`` is last.
* ``audio_decode``: an audio delta that does not decode in the format and rate it states.
* ``unknown_response``: a ``response.speak`` or delta for a response id that was never
  created (docs/protocol.md §4.2: ``response.created`` opens every response).

Recorded by :class:`~duplexctl.protocol.client_state.ClientSession` through :meth:`violate`
(the frame never reached the checks above): ``binary_frame``, ``not_json``, ``not_object``
(docs/protocol.md §1.3: one JSON object per text frame), ``malformed_event`` (the frame breaks
:mod:`duplexctl.protocol.server_events`), ``seq_out_of_order`` (a seq at or below one already
processed, outside the replay that follows a resume) and ``client_error`` (digesting a frame
raised: a duplexctl bug, recorded with the frame instead of ending the connection).

**Evidence.** The first :data:`EVIDENCE_PER_KIND` violations of each kind keep the offending
frame, trimmed (:func:`evidence`), next to its seq and receive time, so a report says what the
server sent, not only how often; at most :data:`KEPT_PER_KIND` of each kind are kept at all
(a hostile server can send millions), while :meth:`InvariantChecker.counts` stays exact.

The checker reads happenings duck-typed (``type``, ``seq``, ``epoch``, ``recv_ns`` and the
kind-specific fields), so it does not import client_state and can be fed by anything.

Public API::

    checker = InvariantChecker(start_seq=0, knows_history=True)
    checker.new_connection(); checker.check(happening); checker.check_envelope(happening)
    checker.violate(name, detail, recv_ns=…, seq=…, response_id=…, frame=…) -> Violation
    checker.violations: list[Violation]; checker.counts() -> dict[str, int]; checker.total
    checker.on_violation = fn             # called with each Violation as it is recorded
    checker.open_responses -> list[str]; checker.open_at_close -> list[str]
    checker.finish() -> list[str]      # response ids never finished
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Final

from duplexctl.protocol import codec

_DELTAS: Final = frozenset(
    {
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
        "response.output_text.delta",
    }
)
_UNSEQUENCED_OK_BEFORE_CREATED: Final = frozenset({"error", "session.resync_required"})
_RESPONSE_EVENTS: Final = _DELTAS | {"response.speak"}

#: Violations of one kind that keep their frame as evidence.
EVIDENCE_PER_KIND: Final = 3
#: Violations of one kind kept at all (the count stays exact beyond it).
KEPT_PER_KIND: Final = 100
#: Evidence is cut to this many characters (a JSON frame) or bytes (a frame that is not).
EVIDENCE_CHARS: Final = 400
GARBAGE_BYTES: Final = 60


def evidence(frame: Any) -> str:
    """``frame`` as a report can show it: a decoded frame as JSON text, a frame that did not
    decode as the repr of its first :data:`GARBAGE_BYTES` bytes; trimmed, with its size."""
    if isinstance(frame, str | bytes):
        data = frame.encode(errors="replace") if isinstance(frame, str) else frame
        shown = repr(data[:GARBAGE_BYTES])
        return (
            shown
            if len(data) <= GARBAGE_BYTES
            else f"{shown} (first {GARBAGE_BYTES} of {len(data)} bytes)"
        )
    try:
        text = codec.dumps(frame)
    except TypeError:
        text = repr(frame)
    if len(text) <= EVIDENCE_CHARS:
        return text
    return f"{text[:EVIDENCE_CHARS]}... (first {EVIDENCE_CHARS} of {len(text)} characters)"


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: ``name`` (stable, for counting), a human ``detail``, and for the
    first few of each kind ``frame``: the offending frame as :func:`evidence`."""

    name: str
    detail: str
    recv_ns: int | None
    seq: int | None = None
    response_id: str | None = None
    frame: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class InvariantChecker:
    """Feeds on happenings in receive order; see the module docstring for the rules."""

    def __init__(self, *, start_seq: int = 0, knows_history: bool = True) -> None:
        # knows_history=False: the session was opened by someone else (we only resume it),
        # so responses and session.created from before our first frame are unknown.
        self.knows_history = knows_history
        self.violations: list[Violation] = []
        self._counts: Counter[str] = Counter()
        #: called with every violation as it is recorded (a transport logs them)
        self.on_violation: Callable[[Violation], None] | None = None
        self.connections = 0
        self.started = not knows_history
        self.closed = False
        self.ended = False
        self.last_seq = start_seq
        self.max_epoch = 0
        self._created: set[str] = set()
        self._done: set[str] = set()
        self._open: dict[str, None] = {}  # insertion-ordered set of open response ids
        self.open_at_close: list[str] = []

    def violate(
        self,
        name: str,
        detail: str,
        *,
        recv_ns: int | None,
        seq: int | None = None,
        response_id: str | None = None,
        frame: Any = None,
    ) -> Violation:
        """Record one violation (evidence kept for the first few of its kind)."""
        n = self._counts[name]
        self._counts[name] = n + 1
        shown = evidence(frame) if frame is not None and n < EVIDENCE_PER_KIND else None
        violation = Violation(name, detail, recv_ns, seq, response_id, shown)
        if n < KEPT_PER_KIND:
            self.violations.append(violation)
        if self.on_violation is not None:
            self.on_violation(violation)
        return violation

    def _violate(self, name: str, detail: str, h: Any, response_id: str | None = None) -> None:
        self.violate(
            name,
            detail,
            recv_ns=getattr(h, "recv_ns", None),
            seq=getattr(h, "seq", None),
            response_id=response_id,
            frame=getattr(h, "frame", None),
        )

    @property
    def total(self) -> int:
        return sum(self._counts.values())

    def new_connection(self) -> None:
        self.connections += 1

    def check_envelope(self, h: Any) -> None:
        """The checks every frame gets, even one the client does not act on (malformed):
        nothing after session.closed, session.created first, seq continuity."""
        etype: str = h.type
        seq: int | None = h.seq
        if self.closed:
            if etype == "session.closed":
                self._violate("duplicate_session_closed", "a second session.closed", h)
            else:
                self._violate("event_after_session_closed", f"{etype} after session.closed", h)
        self._check_started(etype, seq, h)
        if seq is not None:
            if seq != self.last_seq + 1:
                self._violate(
                    "seq_gap", f"server_event_seq {seq} after {self.last_seq} ({etype})", h
                )
            self.last_seq = max(self.last_seq, seq)

    def check(self, h: Any) -> None:
        """Every check, for a frame the client acts on."""
        etype: str = h.type
        self.check_envelope(h)
        self._check_response(etype, h)
        if h.epoch is not None:
            self.max_epoch = max(self.max_epoch, h.epoch)
        if etype == "response.output_audio.delta" and h.decode_error:
            self._violate("audio_decode", h.decode_error, h, h.response_id)
        if etype in ("session.closed", "session.expired") and not self.ended:
            self.ended = True
            self.open_at_close = list(self._open)
        if etype == "session.closed":
            self.closed = True

    def _check_started(self, etype: str, seq: int | None, h: Any) -> None:
        if etype == "session.created":
            if self.started and self.knows_history:
                self._violate("duplicate_session_created", "a second session.created", h)
            self.started = True
        elif etype == "session.resumed" and not self.started:
            self._violate("event_before_session_created", "session.resumed first", h)
            self.started = True
        elif not self.started and not (seq is None and etype in _UNSEQUENCED_OK_BEFORE_CREATED):
            self._violate("event_before_session_created", f"{etype} before session.created", h)

    def _check_response(self, etype: str, h: Any) -> None:
        if etype == "response.created":
            rid = h.response_id
            if rid in self._created:
                self._violate("duplicate_response_created", f"{rid} created twice", h, rid)
            self._created.add(rid)
            if rid not in self._done:
                self._open[rid] = None
        elif etype == "response.done":
            rid = h.response_id
            if rid in self._done:
                self._violate("duplicate_response_done", f"{rid} done twice", h, rid)
            elif rid not in self._created and self.knows_history:
                self._violate("response_done_without_created", f"{rid} done, never created", h, rid)
            self._done.add(rid)
            self._open.pop(rid, None)
        elif etype in _RESPONSE_EVENTS:
            rid = h.response_id
            if rid not in self._created and self.knows_history:
                self._violate("unknown_response", f"{etype} for {rid}, never created", h, rid)
            if etype not in _DELTAS:
                return
            if rid in self._done:
                self._violate("delta_after_response_done", f"{etype} after response.done", h, rid)
            if h.epoch is not None and h.epoch < self.max_epoch:
                self._violate(
                    "old_epoch_delta",
                    f"{etype} of epoch {h.epoch} after epoch {self.max_epoch}",
                    h,
                    rid,
                )

    @property
    def open_responses(self) -> list[str]:
        """Responses created and not (yet) done."""
        return list(self._open)

    def finish(self) -> list[str]:
        """End of observation: the responses that never got a ``response.done``."""
        return self.open_at_close if self.ended else self.open_responses

    def counts(self) -> dict[str, int]:
        return dict(self._counts)
