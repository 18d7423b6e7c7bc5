"""Numbers as a client sends them: what counts as a number, a sample rate, a position.

One place for the numeric rules every client field is held to before the engine computes
with it or echoes it (docs/protocol.md §3, §5):

* a *number* is a finite int or float, never a bool (JSON ``true`` is not 1 here);
* a *sample rate* an append is decoded at must be an integer in 8000-192000 Hz, with the
  three messages of vLLM-Omni 0.30.0's ``validate_input_sample_rate_hz``; a rate outside it
  would reach the resampler (a rate of 0 divided by zero, 2**63 pinned the event loop);
* a rate *declared* in a session object is read as 0.30.0 reads it: a positive number,
  truncated to an int; anything else declares no rate;
* a *position* the server echoes (a clock hint, an acknowledged or truncated position) must
  be within the JSON-safe integer range (±2**53): beyond it the wire encoder refuses the
  integer, and no client clock gets there (2**53 ms is 285,000 years).
"""

from __future__ import annotations

import math
from typing import Any, Final, TypeGuard

MIN_RATE: Final = 8000
MAX_RATE: Final = 192000
MAX_SAFE_INTEGER: Final = 2**53


def is_number(value: Any) -> TypeGuard[int | float]:
    """A finite int or float (bools excluded)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_position(value: Any) -> TypeGuard[int | float]:
    """A number the server can echo as an integer (|value| <= 2**53)."""
    return is_number(value) and abs(value) <= MAX_SAFE_INTEGER


def checked_rate(value: Any) -> int:
    """``value`` as an input sample rate; raises ValueError with 0.30.0's message."""
    if not is_number(value):
        raise ValueError("sample_rate_hz must be a finite integer")
    rate = int(value)
    if rate != value:
        raise ValueError("sample_rate_hz must be an integer")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise ValueError(f"sample_rate_hz must be between {MIN_RATE} and {MAX_RATE}")
    return rate


def declared_rate(value: Any) -> int | float | None:
    """A rate as a session object declares it: a positive number, truncated to an int; else
    no rate. A float beyond the JSON-safe range stays the float it was: it is echoed as sent
    (its int form could not be encoded) and refused by every append like any rate out of
    range."""
    if not is_number(value) or value <= 0:
        return None
    return value if isinstance(value, float) and value > MAX_SAFE_INTEGER else int(value)
