"""One command's pushing: where the workers' states arrive, and when a push goes out.

The pushed figures come from where the live dashboard's do: each worker's
:class:`~duplexctl.load.recorder.Recorder`, on the tickers that send its dashboard snapshots
(an in-process run's watcher, a local worker's ``live`` messages, a Ray actor's polls).
Every :attr:`PushOptions.interval_s` such a ticker also sends an ``("export", index,
state)`` of the recorder (:mod:`~.state`), and one last time when its share ends, so the
last push holds exactly what the report holds. Here, in the one process that pushes (the
command's), :func:`observe` keeps each source's latest state (with its node on Ray) and
hands a batch to the :class:`~.remote_write.Pusher` every interval; :func:`flush` pushes the
final one when a run (or a capacity step) ends and waits for it, bounded.

Like the scraper's live line (``prometheus/run.py``), the feed of the run in progress is this
module's: the hooks in ``load`` are one call each, and do nothing when no
``--prometheus-rw`` was given.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from duplexctl.aio import cancel_and_wait
from duplexctl.export.options import PushOptions

if TYPE_CHECKING:  # protobuf and cramjam are imported only where something is pushed
    from duplexctl.export.remote_write import Pusher
    from duplexctl.export.state import ExportState, Labels


class Cadence:
    """A worker's export clock: due at once, then every ``interval_s``."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._next = 0.0

    def due(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        if now < self._next:
            return False
        self._next = now + self.interval_s
        return True


class Feed:
    """The pushing process's side (see the module docstring)."""

    def __init__(self, pusher: Pusher, run_id: str) -> None:
        self.pusher = pusher
        self.run_id = run_id
        self._latest: dict[int, tuple[str | None, ExportState]] = {}
        self._labels: Labels = ()
        self._cadence = Cadence(pusher.interval_s)

    def observe(self, source: int, state: ExportState, node: str | None = None) -> None:
        from duplexctl.export.remote_write import Batch

        # a new dict each time: the push thread may be reading the previous one
        self._latest = {**self._latest, source: (node, state)}
        if self._cadence.due():
            self.pusher.offer(Batch(self._latest, self._labels))

    def step(self, level: int | None) -> None:
        """A capacity step begins (``level``), or the search is over (None): its states
        start afresh, under its own ``level`` label."""
        self._latest = {}
        self._labels = () if level is None else (("level", str(level)),)
        self._cadence = Cadence(self.pusher.interval_s)

    async def flush(self) -> bool:
        """Push the latest states now and wait for it (bounded); False if not sent in time."""
        from duplexctl.export.remote_write import Batch

        if not self._latest:
            return True
        self.pusher.offer(Batch(self._latest, self._labels, final=True))
        return await asyncio.to_thread(self.pusher.drain)

    def summary(self) -> dict[str, Any]:
        return {"run_id": self.run_id, **self.pusher.summary()}


_active: Feed | None = None


@contextlib.asynccontextmanager
async def following(
    feed: Feed | None, make_state: Callable[[bool], ExportState], source: int = 0
) -> AsyncIterator[None]:
    """While the block runs, observe ``make_state(True)`` (the run still going) every push
    interval; once it is over, ``make_state(False)`` (what ``replay`` pushes: one session,
    no worker to send states). ``source``: one per scenario of a run of several, so each
    one's last state stays in the totals while the next one runs."""
    if feed is None:
        yield
        return

    async def tick() -> None:
        while True:
            feed.observe(source, make_state(True))
            await asyncio.sleep(feed.pusher.interval_s)

    ticker = asyncio.create_task(tick())
    try:
        yield
    finally:
        await cancel_and_wait(ticker)
        feed.observe(source, make_state(False))


def observe(source: int, state: ExportState, node: str | None = None) -> None:
    """A source's state (a worker's ``export`` message) for the run in progress, if any."""
    if _active is not None:
        _active.observe(source, state, node)


def step(level: int | None) -> None:
    if _active is not None:
        _active.step(level)


async def flush() -> None:
    if _active is not None:
        await _active.flush()


@contextlib.asynccontextmanager
async def pushing(
    options: PushOptions | None, *, command: str, target: str
) -> AsyncIterator[Feed | None]:
    """Push for as long as the block runs (None when ``--prometheus-rw`` was not given); the
    run's labels are its ``command``, a new run id and its ``target`` URL."""
    global _active
    if options is None:
        yield None
        return
    from duplexctl.export import names
    from duplexctl.export.remote_write import Pusher

    run_id = names.new_run_id(command)
    labels: Labels = tuple(
        sorted(
            {
                "job": names.JOB,
                "command": command,
                "run_id": run_id,
                "target": names.target_label(target),
            }.items()
        )
    )
    pusher = Pusher(
        options.url, labels, interval_s=options.interval_s, histograms=options.histograms
    ).start()
    feed = Feed(pusher, run_id)
    print(
        f"duplexctl: pushing to {pusher.endpoint.url} every {options.interval_s:g} s as "
        f"run_id={run_id}",
        file=sys.stderr,
        flush=True,
    )
    _active = feed
    try:
        yield feed
    finally:
        _active = None
        # the last states, also of a run that failed (its server unreachable: attempts failed)
        with contextlib.suppress(Exception):
            await feed.flush()
        await asyncio.to_thread(pusher.stop)
