"""One jittered exponential back-off for every retry of the client (docs/protocol.md §7.6).

A resume after a drop (``client/connection.py``) and a closed-loop user's next attempt after
a refused admission (``load/engine.py``) wait the same way: the first wait ``min_s``, each
next one doubled up to ``max_s``, every wait multiplied by a uniform draw from
:data:`JITTER` (vLLM-Omni's own client does so: sessions dropped together do not come back in
step), back to ``min_s`` after a success. One object holds that rule, so the two cannot
drift apart (they were two loops with the same numbers), and :meth:`Backoff.bound` gives the
longest the waits can add up to (the resume's documented bound).
"""

from __future__ import annotations

import random
from typing import Final

#: the first wait, and the longest one, in seconds
MIN_S: Final = 0.25
MAX_S: Final = 4.0
#: every wait is multiplied by a uniform draw from this range
JITTER: Final = (0.5, 1.5)


class Backoff:
    """The waits between retries: :meth:`delay` for the next one, :meth:`reset` after a
    success."""

    def __init__(self, min_s: float = MIN_S, max_s: float = MAX_S) -> None:
        self.min_s = min_s
        self.max_s = max_s
        self._base = min_s

    def delay(self) -> float:
        """The next wait (jittered); the one after it doubles, up to ``max_s``."""
        base, self._base = self._base, min(self._base * 2, self.max_s)
        return base * random.uniform(*JITTER)

    def reset(self) -> None:
        """A retry succeeded: the next wait is the first one again."""
        self._base = self.min_s

    def bound(self, waits: int) -> float:
        """The longest ``waits`` consecutive waits from the first can add up to."""
        base, total = self.min_s, 0.0
        for _ in range(max(0, waits)):
            total += base * JITTER[1]
            base = min(base * 2, self.max_s)
        return total
