"""The registry of probes: name, time bounds, and the function that runs it.

A probe is an ``async def fn(ctx: ProbeContext) -> str`` whose docstring says which bug it
catches and why that bug matters; it returns a one-line summary on success, raises
:class:`ProbeFailed` when the server broke the property and :class:`ProbeSkipped` when the
property cannot be checked here. Registering with :func:`probe` keeps the list in one place
so ``--only`` can name any of them and the runner can budget time before starting one.
The run order is not here: it is one tuple with its reasons, ``duplexctl.probe.probes``
``RUN_ORDER``, which imports every probe module (this module imports none: no circle).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from duplexctl.probe.context import ProbeContext

ProbeFn = Callable[["ProbeContext"], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Probe:
    """One registered probe.

    ``expected_s`` is how long it takes against a healthy server (what the run budget is
    checked against before it starts); ``max_s`` is the hard bound after which it is stopped
    and fails — a server that never answers must not hang the run.
    """

    name: str
    expected_s: float
    max_s: float
    fn: ProbeFn

    @property
    def doc(self) -> str:
        return (self.fn.__doc__ or "").strip()

    @property
    def catches(self) -> str:
        """The first line of the docstring: the bug this probe is for."""
        return self.doc.splitlines()[0].strip() if self.doc else ""


_PROBES: dict[str, Probe] = {}


def probe(name: str, *, expected_s: float, max_s: float) -> Callable[[ProbeFn], ProbeFn]:
    """Register ``fn`` as probe ``name`` (its place in the run: ``probes.RUN_ORDER``)."""

    def register(fn: ProbeFn) -> ProbeFn:
        if name in _PROBES:
            raise ValueError(f"probe {name!r} registered twice")
        _PROBES[name] = Probe(name, expected_s, max_s, fn)
        return fn

    return register


def registered() -> dict[str, Probe]:
    """The probes registered so far, by name (``duplexctl.probe.probes`` registers them all and
    puts them in run order)."""
    return dict(_PROBES)
