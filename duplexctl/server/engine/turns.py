"""User turns waiting for an answer: committed audio, audio items, a text item.

The input lane and the conversation produce turns; responses consume them. A turn waits
*pending* when its commit did not ask for a response (``response.create`` answers it later,
§3.4), or *deferred* when it was committed while a reply still owned the turn (it is answered
when that reply ends, §6.1). At most ``max_pending_turns`` wait (``input_backpressure``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class Turn:
    """A committed user turn the model may answer (its audio at 16 kHz, if any)."""

    item_id: str | None
    audio: np.ndarray | None = None
    # a backchannel the model utters while the user speaks (server/behaviour.py): a short
    # reply that answers nothing and takes no turn
    backchannel: bool = False

    @property
    def nbytes(self) -> int:
        return 0 if self.audio is None else int(self.audio.size) * 4


@dataclass(slots=True)
class TurnQueue:
    """The turns a session holds that no reply has taken yet."""

    pending: list[Turn] = field(default_factory=list)
    deferred: list[Turn] = field(default_factory=list)
    text_item: str | None = None  # a user text item response.create may answer

    def __len__(self) -> int:
        return len(self.pending) + len(self.deferred)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.pending) + sum(t.nbytes for t in self.deferred)

    def clear(self) -> None:
        """Forget every waiting audio turn (input.cancel, barge_in)."""
        self.pending.clear()
        self.deferred.clear()
