"""The protocol invariants of metrics.md, checked on what a client receives.

A violation is a server bug (or a transport that lost or duplicated events), so it is
recorded as a structured :class:`Violation` and counted — never raised, never silently
ignored: a load run must keep going and report how often the server broke its contract.

Checked, in the order metrics.md lists them:

* ``response_done_missing`` is *not* a violation by itself: a ``session.close`` cancels a
  running response without a ``response.done`` (protocol.md §6.8). Responses still open are
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

The checker reads happenings duck-typed (``type``, ``seq``, ``epoch``, ``recv_ns`` and the
kind-specific fields), so it does not import client_state and can be fed by anything.

Public API::

    checker = InvariantChecker(start_seq=0, knows_history=True)
    checker.new_connection(); checker.check(happening)
    checker.violations: list[Violation]; checker.counts() -> dict[str, int]
    checker.open_responses -> list[str]; checker.open_at_close -> list[str]
    checker.finish() -> list[str]      # response ids never finished
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Final

_DELTAS: Final = frozenset(
    {
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
        "response.output_text.delta",
    }
)
_UNSEQUENCED_OK_BEFORE_CREATED: Final = frozenset({"error", "session.resync_required"})


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: ``name`` (stable, for counting), a human ``detail``."""

    name: str
    detail: str
    recv_ns: int | None
    seq: int | None = None
    response_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class InvariantChecker:
    """Feeds on happenings in receive order; see the module docstring for the rules."""

    def __init__(self, *, start_seq: int = 0, knows_history: bool = True) -> None:
        # knows_history=False: the session was opened by someone else (we only resume it),
        # so responses and session.created from before our first frame are unknown.
        self.knows_history = knows_history
        self.violations: list[Violation] = []
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

    def _violate(self, name: str, detail: str, h: Any, response_id: str | None = None) -> None:
        self.violations.append(
            Violation(
                name, detail, getattr(h, "recv_ns", None), getattr(h, "seq", None), response_id
            )
        )

    def new_connection(self) -> None:
        self.connections += 1

    def check(self, h: Any) -> None:
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
        elif etype in _DELTAS:
            rid = h.response_id
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
        return dict(Counter([v.name for v in self.violations]))
