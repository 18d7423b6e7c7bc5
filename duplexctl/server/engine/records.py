"""The record of each reply of a session: ids, epoch, what was said, and its playback ledger.

One :class:`Response` object is shared by the parts that deal with a reply (generation, the
cancel family, the playback ledger); :class:`ResponseRecords` finds them by id, knows the
running and the last one, and forgets the oldest finished ones so a long session does not
keep every reply it ever made (docs/protocol.md §3.4: only the last reply and replies whose
audio is unacknowledged can still be addressed).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Final

from duplexctl.protocol import ids

# Finished replies kept for lookups by id (``response.cancel`` of an old id is answered
# "already complete" while it is remembered). Each costs well under a kilobyte once finished.
MAX_FINISHED_RECORDS: Final = 256


@dataclass(slots=True)
class Ledger:
    """Milliseconds of a reply's audio: generated, sent, played and committed (§6.5)."""

    generated_ms: int = 0
    sent_ms: int = 0
    played_ms: int = 0
    committed_ms: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "generated_ms": self.generated_ms,
            "sent_ms": self.sent_ms,
            "played_ms": self.played_ms,
            "committed_ms": self.committed_ms,
        }


@dataclass(slots=True)
class Response:
    """One reply: its identity, its output so far, where it is in its life."""

    id: str
    epoch: int
    turn_id: int
    previous_item_id: str | None
    output_format: str
    output_rate: int | None
    metadata: dict[str, Any] | None = None
    promoted: bool = False  # a deferred turn answered when the reply before it ended
    in_history: bool = True  # response.create conversation="none" keeps it out of history
    text: str = ""
    emitted_text: str = ""
    ledger: Ledger = field(default_factory=Ledger)
    chunks: int = 0
    last_b64: str = ""  # the last delta, repeated in response.done metadata
    status: str = "in_progress"
    finished: bool = False  # a terminal event went out (or the session stopped)
    # a frame-locked stream counted in the GPU's running replies until it finishes (a
    # generated reply is counted by the model itself, server/model.py)
    counted: bool = False
    announced: bool = False  # response.created went out
    released: bool = False  # its playback record is gone (acknowledged, cut or cancelled)
    superseded: bool = False  # a later user turn was committed after it finished
    task: asyncio.Task[None] | None = None

    @property
    def item_id(self) -> str:
        return ids.assistant_item_id(self.id)


class ResponseRecords:
    """Every remembered reply of one session, by id; the running one; the last one."""

    def __init__(self) -> None:
        self.by_id: dict[str, Response] = {}
        self.active: Response | None = None
        self.last: Response | None = None

    def add(self, response: Response) -> None:
        self.by_id[response.id] = response
        self.active = self.last = response
        self._forget_oldest()

    def get(self, response_id: str) -> Response | None:
        return self.by_id.get(response_id)

    def unfinished(self) -> list[Response]:
        return [r for r in self.by_id.values() if not r.finished]

    def _forget_oldest(self) -> None:
        """Drop the oldest finished, released replies beyond MAX_FINISHED_RECORDS."""
        excess = len(self.by_id) - MAX_FINISHED_RECORDS
        if excess <= 0:
            return
        for rid in [
            rid for rid, r in self.by_id.items() if r.finished and r.released and r is not self.last
        ][:excess]:
            del self.by_id[rid]
