"""``--workers W``: a load run's sessions spread over W processes, merged exactly.

The parent starts W processes (``spawn``), gives each its share of the load
(:meth:`LoadConfig.share`), starts them together on one monotonic origin (CLOCK_MONOTONIC is
system-wide on Linux, so their time slices line up) and merges their recorders exactly:
histogram buckets are added, counts summed, session intervals pooled for the exact
``observed_capacity`` sweep, JSONL parts concatenated. A worker whose run outgrew
:data:`~duplexctl.report.slices.MAX_SLICES` slices doubled its slice length; workers that
doubled a different number of times merge at the longest length, exactly. Workers send
``ready``, ``live`` snapshots and ``done`` (or ``error``) on one queue; the parent forwards
Ctrl-C to them.

Workers die with their parent: each holds a :class:`~duplexctl.load.lifeline.Lifeline`, and
when the parent dies for any reason (SIGKILL included) it closes its sessions with
``session.close`` and exits within a few seconds, reporting nothing (nobody is listening).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import queue
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from duplexctl.client.target import use_tls
from duplexctl.errors import BadInput
from duplexctl.export import live as live_export
from duplexctl.export.live import Cadence
from duplexctl.load.config import LoadConfig
from duplexctl.load.dashboard import Dashboard, combine
from duplexctl.load.engine import Plan, drive, make_plan, make_recorder
from duplexctl.load.interrupts import Interrupts
from duplexctl.load.lifeline import EXIT_PARENT_GONE, Lifeline
from duplexctl.load.recorder import Recorder
from duplexctl.report.load_report import merge_jsonl
from duplexctl.rundir import Writes

WORKER_START_TIMEOUT_S: Final = 120.0
WORKER_END_GRACE_S: Final = 120.0


async def in_workers(
    config: LoadConfig,
    url: str,
    irq: Interrupts,
    out: Path | None,
    dash: Dashboard,
    writes: Writes | None = None,
) -> tuple[Recorder, list[dict[str, Any]]]:
    """Run ``config`` in ``config.execution.workers`` processes; their recorders merged exactly."""
    ctx = mp.get_context("spawn")
    messages: Any = ctx.Queue()
    lifeline, keep = Lifeline.to_parent(ctx)
    try:
        return await _run_workers(
            config, url, irq, out, dash, ctx, lifeline, messages, writes or Writes()
        )
    finally:
        keep.close()  # workers still running (given up on) see the lifeline break and stop


async def _run_workers(
    config: LoadConfig,
    url: str,
    irq: Interrupts,
    out: Path | None,
    dash: Dashboard,
    ctx: Any,
    lifeline: Lifeline,
    messages: Any,
    writes: Writes,
) -> tuple[Recorder, list[dict[str, Any]]]:
    go = ctx.Event()
    origin_value: Any = ctx.Value("d", 0.0)
    n = config.execution.workers
    procs = []
    for i in range(n):
        share = config.share(i, n)
        proc = ctx.Process(
            target=worker_main,
            args=(share, i, url, str(out) if out else None, messages, go, origin_value, lifeline),
            name=f"duplexctl-load-{i}",
            daemon=True,
        )
        proc.start()
        procs.append(proc)
        irq.children.append(proc.pid)  # type: ignore[arg-type]
    lifeline.pipe.close()  # the workers hold their copies; this process keeps the other end
    loop = asyncio.get_running_loop()

    async def get(timeout: float) -> Any:
        try:
            return await loop.run_in_executor(None, messages.get, True, timeout)
        except queue.Empty:
            return None

    ready: set[int] = set()
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    errors: list[str] = []
    while len(ready) < n and time.monotonic() < deadline and not irq.stop.is_set():
        msg = await get(0.5)
        if msg is None:
            if any(not p.is_alive() for p in procs):
                break
            continue
        if msg[0] == "ready":
            ready.add(msg[1])
        elif msg[0] == "error":
            errors.append(msg[2])
            break
    origin = time.monotonic() + 0.2
    origin_value.value = origin
    go.set()
    if errors or len(ready) < n:
        for p in procs:
            p.kill()
        raise BadInput("load workers failed to start: " + ("; ".join(errors) or "timeout"))
    snapshots: dict[int, dict[str, Any]] = {}
    done: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    shape = config.shape
    end = shape.warmup_s + (shape.duration_s or 0) + WORKER_END_GRACE_S
    hard_deadline = time.monotonic() + max(end, 3600.0 if shape.duration_s is None else end)
    while len(done) < n and time.monotonic() < hard_deadline:
        msg = await get(0.25)
        if msg is None:
            if all(not p.is_alive() for p in procs) and messages.empty():
                break
            continue
        kind, index = msg[0], msg[1]
        if kind == "live":
            snapshots[index] = msg[2]
            dash.update(combine(snapshots.values()))
        elif kind == "export":
            live_export.observe(index, msg[2])
        elif kind == "done":
            done[index] = (msg[2], msg[3])
        elif kind == "write_failed":  # a worker's JSONL: the run stops (the caller's halt)
            writes.failed(msg[2], OSError(msg[3], msg[4]))
        elif kind == "error":
            errors.append(f"worker {index}: {msg[2]}")
            done[index] = ({}, {"worker": index, "error": msg[2]})
    for p in procs:
        await loop.run_in_executor(None, p.join, 10.0)
        if p.is_alive():
            p.kill()
    irq.children.clear()
    merged = merge_parts(config, origin, done, out, writes)
    if errors and not done:
        raise BadInput("; ".join(errors))
    return merged


def merge_parts(
    config: LoadConfig,
    origin: float,
    done: Mapping[int, tuple[dict[str, Any], dict[str, Any]]],
    out: Path | None,
    writes: Writes | None = None,
) -> tuple[Recorder, list[dict[str, Any]]]:
    """The workers' ``(encoded recorder, info)`` merged exactly into one recorder, and their
    JSONL parts (``turns.wN.jsonl``, ``behaviour.wN.jsonl`` …, in ``out``) appended to the
    run's files. Local processes and Ray actors (:mod:`duplexctl.load.cluster`) end here
    alike."""
    merged = make_recorder(config, origin=origin)
    infos = []
    for index in sorted(done):
        encoded, info = done[index]
        if encoded:
            merged.merge_encoded(encoded)
        infos.append(info)
    if out is not None:
        for name in ("turns", "sessions", "behaviour"):
            merge_jsonl(sorted(out.glob(f"{name}.w*.jsonl")), out / f"{name}.jsonl", writes)
    return merged, infos


def worker_main(
    config: LoadConfig,
    index: int,
    url: str,
    out: str | None,
    messages: Any,
    go: Any,
    origin_value: Any,
    lifeline: Lifeline,
) -> None:
    """Entry point of a worker process: its share of the run, reported on ``messages``."""
    lifeline.arm()
    try:
        use_tls(config.target.tls)  # the run's trust, from the config: no environment
        plan = make_plan(config)
    except Exception as exc:
        messages.put(("error", index, str(exc)))
        return
    messages.put(("ready", index))
    if not go.wait(WORKER_START_TIMEOUT_S):
        messages.put(("error", index, "never told to start"))
        return
    origin = float(origin_value.value)
    runner = loop_runner(config)
    try:
        encoded, info = runner(run_share(config, index, url, out, messages, origin, plan, lifeline))
    except Exception as exc:
        if lifeline.lost:
            os._exit(EXIT_PARENT_GONE)
        messages.put(("error", index, f"{type(exc).__name__}: {exc}"))
        return
    if lifeline.lost:  # sessions closed; nobody to report to (and a dead pipe to block on)
        os._exit(EXIT_PARENT_GONE)
    messages.put(("done", index, encoded, info))


class Checkpoints:
    """A recorder's checkpoints, each holding only the time slices that may have changed
    since the previous one: from the newest slice it held (still filling then), or all of
    them once the slicer doubled its slice length. Encoding all of a long run's slices (up
    to 128, ~10 ms each) would stall the sessions' event loop at every checkpoint.
    :meth:`duplexctl.load.cluster.driver.Member.absorb` joins them again."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.since = 0
        self.slice_s = recorder.slicer.slice_s

    def next(self) -> dict[str, Any]:
        if self.recorder.slicer.slice_s != self.slice_s:
            self.since, self.slice_s = 0, self.recorder.slicer.slice_s
        part = self.recorder.encode(slices_since=self.since)
        self.since += max(0, len(part["slicer"]["slices"]) - 1)
        return part


def loop_runner(config: LoadConfig) -> Any:
    """``uvloop.run`` (unless ``--no-uvloop`` or not installed), else ``asyncio.run``: how
    every worker, process or actor, runs :func:`run_share`."""
    if config.execution.uvloop:
        with contextlib.suppress(ImportError):
            import uvloop

            return uvloop.run
    return asyncio.run


async def run_share(
    config: LoadConfig,
    index: int,
    url: str,
    out: str | None,
    messages: Any,
    origin: float,
    plan: Plan,
    lifeline: Lifeline,
    *,
    main_thread: bool = True,
    checkpoint_s: float | None = None,
    on_stopper: Callable[[Callable[[], object]], None] | None = None,
    live_seconds: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One worker's share of the run from ``origin`` (its own monotonic clock) to the end;
    ``("live", index, snapshot)`` on ``messages`` every status interval.

    The one session engine of every kind of worker: a local process (``main_thread``: its
    signals are routed here) and a Ray actor (:mod:`duplexctl.load.cluster.actor`), which
    runs this in a thread of its own, gets a thread-safe stop function through
    ``on_stopper`` and asks for ``("checkpoint", index, encoded recorder)`` every
    ``checkpoint_s`` (:class:`Checkpoints`) — what survives of its figures if its node dies
    — and, with ``live_seconds``, ``("second", index, delta)`` at every whole second from
    ``origin`` and once more at the end (:mod:`duplexctl.load.cluster.seconds`).
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if main_thread:
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, lifeline.lose)
    # the parent died (SIGTERM is its death signal, or the lifeline's watcher saw it): the
    # run stops like at its end: arrivals stop, every session closes with session.close
    lifeline.on_lost(lambda: loop.call_soon_threadsafe(stop.set))
    if on_stopper is not None:
        on_stopper(lambda: loop.call_soon_threadsafe(stop.set))
    await asyncio.sleep(max(0.0, origin - time.monotonic()))

    def write_failed() -> None:  # this worker's JSONL: it stops, and so does the run
        loop.call_soon_threadsafe(stop.set)
        failure = writes.failure
        if failure is not None and not lifeline.lost:
            messages.put(("write_failed", index, str(failure.path), failure.errno, failure.cause))

    writes = Writes(write_failed)
    rec = make_recorder(
        config, origin=origin, worker=index, out_dir=Path(out) if out else None, writes=writes
    )
    task = asyncio.create_task(
        drive(config, url=url, origin=origin, stop=stop, worker=index, plan=plan, recorder=rec)
    )

    push = config.output.push
    cadence = None if push is None else Cadence(push.interval_s)

    def export() -> None:  # --prometheus-rw: the recorder's state, for the pushing process
        if cadence is not None and not lifeline.lost:
            messages.put(("export", index, rec.export_state()))

    async def report_live() -> None:
        last_checkpoint = time.monotonic()
        checkpoints = Checkpoints(rec)
        export()
        while True:
            await asyncio.sleep(config.output.status_interval_s)
            if lifeline.lost:
                continue
            messages.put(("live", index, rec.live()))
            if cadence is not None and cadence.due():
                export()
            if checkpoint_s is not None and time.monotonic() - last_checkpoint >= checkpoint_s:
                last_checkpoint = time.monotonic()
                messages.put(("checkpoint", index, checkpoints.next()))

    async def report_seconds() -> None:
        assert rec.seconds is not None
        while True:
            await asyncio.sleep(max(0.0, rec.seconds.due - time.monotonic()))
            messages.put(("second", index, rec.cut_second()))

    tickers = [asyncio.create_task(report_live())]
    if live_seconds:
        from duplexctl.load.cluster.seconds import SecondTally

        rec.seconds = SecondTally(origin)
        tickers.append(asyncio.create_task(report_seconds()))
    try:
        recorder, info = await task
    finally:
        for ticker in tickers:
            ticker.cancel()
    if live_seconds:  # the last, partial second: the seconds add up to the whole recorder
        messages.put(("second", index, rec.cut_second()))
    export()  # the last state: the final push equals the report
    return recorder.encode(), info
