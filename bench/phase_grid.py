"""Where a benchmark session starts its append schedule: on the same send phases as ``load``.

``duplexctl load`` puts every session's schedule on one of ``--send-phases`` evenly spaced
instants per chunk period (``duplexctl/audio/sendgrid.py``: slots of ``period / phases`` on
the monotonic clock, phases filled evenly). How many sessions send at one instant decides how
often a client process wakes up, and that is a large part of its CPU; so the streamer and the
DuplexClient driver start their schedules on the same grid, and the three clients of
``compare_clients.py`` send the same appends at the same instants. Without it, the other two
clients' phases would be an accident of their start ramp and connect times.

No duplexctl import: the DuplexClient driver runs under the peer venv.
"""

from __future__ import annotations

import math


def phase_start(now: float, index: int, phases: int, period_s: float) -> float:
    """The first instant at or after ``now`` on phase ``index % phases`` of the grid."""
    slot_s = period_s / phases
    n = math.ceil(now / slot_s)
    n += (index - n) % phases
    return n * slot_s
