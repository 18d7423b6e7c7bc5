"""One timed load run (or one capacity step), in this process or in worker processes.

:func:`run_step` drives a run and returns its report: ``--workers 1`` drives every session in
this process; ``W > 1`` hands the sessions to :mod:`duplexctl.load.workers`, ``--ray`` to Ray actors
(:mod:`duplexctl.load.cluster`). Both
:mod:`duplexctl.load.run` (a whole ``duplexctl load``) and :mod:`duplexctl.load.search`
(each step of ``--find-capacity``) call it, so neither imports the other.

Ctrl-C: :class:`~duplexctl.load.interrupts.Interrupts` ends the step like its own timer
does (arrivals stop, every session closes with ``session.close``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from duplexctl.aio import cancel_and_wait
from duplexctl.export import live as live_export
from duplexctl.export.live import Cadence
from duplexctl.load.config import LoadConfig
from duplexctl.load.dashboard import Dashboard, offered_now
from duplexctl.load.engine import drive, make_recorder
from duplexctl.load.interrupts import Interrupts
from duplexctl.load.recorder import Recorder
from duplexctl.load.workers import in_workers
from duplexctl.report.load_report import build_report
from duplexctl.report.tally import RunTally
from duplexctl.rundir import Writes


async def run_step(
    config: LoadConfig,
    url: str,
    embedded: dict[str, Any] | None,
    irq: Interrupts,
    *,
    out: Path | None,
    title: str = "duplexctl load",
    quiet: bool = False,
    writes: Writes | None = None,
) -> dict[str, Any]:
    """One load run (or one capacity step) → its report. A file of ``out`` that cannot be
    written goes to ``writes``, whose stop (the caller's) ends the step as Ctrl-C does."""
    mode = (
        "off"
        if quiet
        else Dashboard.choose(json_output=config.output.json_output, live=config.output.live)
    )
    dash = Dashboard(mode, title=title, offered=offered_now(config.shape))
    t0 = time.monotonic()
    # the step ends by its own timer (which sets step_stop) or by Ctrl-C (irq.stop)
    step_stop = asyncio.Event()
    forward = asyncio.create_task(_forward(irq.stop, step_stop))
    dash.start()
    tally: RunTally
    try:
        if config.execution.ray is not None:  # imports ray: only with --ray
            from duplexctl.load.cluster.driver import in_cluster

            tally, infos = await in_cluster(config, url, irq, out, dash, writes)
        elif config.execution.workers <= 1:
            tally, infos = await _in_process(config, url, step_stop, out, dash, writes)
        else:
            tally, infos = await in_workers(config, url, irq, out, dash, writes)
    finally:
        dash.stop()
        forward.cancel()
    await live_export.flush()  # --prometheus-rw: this run's (or step's) last push, bounded
    wall = time.monotonic() - t0
    end_reasons = sorted({i.get("end_reason", "") for i in infos})
    return build_report(
        tally,
        config=config.echo(),
        workers=infos,
        wall_s=wall,
        chunk_ms=config.chunk_ms,
        url=None if embedded else url,
        embedded=embedded,
        capabilities=tally.capabilities,
        interrupted=irq.interrupted,
        end_reason=",".join(end_reasons),
    )


async def _forward(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


async def _in_process(
    config: LoadConfig,
    url: str,
    stop: asyncio.Event,
    out: Path | None,
    dash: Dashboard,
    writes: Writes | None,
) -> tuple[Recorder, list[dict[str, Any]]]:
    origin = time.monotonic()
    rec = make_recorder(config, origin=origin, out_dir=out, writes=writes)
    task = asyncio.create_task(drive(config, url=url, origin=origin, stop=stop, recorder=rec))

    push = config.output.push
    cadence = None if push is None else Cadence(push.interval_s)

    async def watch() -> None:
        while True:
            if cadence is not None and cadence.due():  # --prometheus-rw: due at once
                live_export.observe(0, rec.export_state())
            await asyncio.sleep(config.output.status_interval_s)
            dash.update(rec.live())

    watcher = asyncio.create_task(watch())
    try:
        recorder, info = await task
    finally:
        await cancel_and_wait(watcher)
    if cadence is not None:  # the last state: the final push equals the report
        live_export.observe(0, recorder.export_state())
    return recorder, [info]
