"""The probes, in the order they run; importing this package registers them
(:mod:`duplexctl.probe.registry`).

Run order matters, and is decided here once (:data:`RUN_ORDER`): the handshake first (every
other probe opens sessions); the probes that need every admission slot free (admission)
before those that may leave one held by a buggy server; the probes of a session's life next;
``resume-after-grace`` late, as it waits out the server's disconnect grace; and
``abandoned-handshake`` last, because on a server with that bug its slot stays taken for the
whole disconnect grace.
"""

from __future__ import annotations

from typing import Final

from duplexctl.probe.probes import (  # noqa: F401  (registration side effect)
    abandoned,
    admission,
    bad_input,
    barge_race,
    fencing,
    handshake,
    heartbeat,
    responses,
    resume,
    tools,
)
from duplexctl.probe.registry import Probe, registered

RUN_ORDER: Final = (
    "handshake",
    "bad-input",
    "admission",
    "responses",
    "barge-in-race",
    "epoch-fencing",
    "tool-calls",
    "resume-replay",
    "journal-gap",
    "takeover",
    "heartbeat",
    "resume-after-grace",
    "abandoned-handshake",
)


def all_probes() -> list[Probe]:
    """Every probe, in :data:`RUN_ORDER`."""
    probes = registered()
    if set(probes) != set(RUN_ORDER):  # a probe added without a place, or a place left over
        raise RuntimeError(f"RUN_ORDER and the registered probes differ: {sorted(probes)}")
    return [probes[name] for name in RUN_ORDER]


def select(only: list[str] | None) -> list[Probe]:
    """The probes named by ``--only`` (in run order); ValueError naming unknown names."""
    probes = all_probes()
    if not only:
        return probes
    known = {p.name for p in probes}
    unknown = [n for n in only if n not in known]
    if unknown:
        raise ValueError(
            f"unknown probe {', '.join(unknown)} (known: {', '.join(p.name for p in probes)})"
        )
    wanted = set(only)
    return [p for p in probes if p.name in wanted]
