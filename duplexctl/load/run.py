"""``duplexctl load`` end to end: target, workers, live view, capacity search, report, verdict.

* **Target.** ``--url``, or the reference server started in this process on a free loopback
  port (one line on stderr says so).
* **Workers.** ``--workers 1`` drives every session in this process. ``W > 1`` starts W
  processes (``spawn``), gives each its share of the load (:meth:`LoadConfig.share`), starts
  them together on one monotonic origin (CLOCK_MONOTONIC is system-wide on Linux, so their
  time slices line up) and merges their recorders exactly: histogram buckets are added,
  counts summed, session intervals pooled for the exact ``observed_capacity`` sweep, JSONL
  parts concatenated.
* **Ctrl-C.** The first SIGINT stops arrivals and closes every session with
  ``session.close`` (workers receive it too); the partial report is written and the command
  exits 130.
* **Verdict.** ``--slo`` expressions are checked at the end (k6 thresholds): any failure
  exits 1. ``invalid_pacing`` is reported, not fatal: the run says its latencies are not to
  be trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duplexctl.errors import BadInput
from duplexctl.load.config import LoadConfig
from duplexctl.load.dashboard import Dashboard, combine
from duplexctl.load.engine import Plan, drive, make_plan, make_recorder
from duplexctl.load.recorder import Recorder
from duplexctl.load.results import build_report, merge_jsonl, render_final, write_outputs
from duplexctl.load.slices import Windows

WORKER_START_TIMEOUT_S = 120.0
WORKER_END_GRACE_S = 120.0


@dataclass(slots=True)
class RunResult:
    report: dict[str, Any]
    exit_code: int


class Interrupts:
    """SIGINT → stop (once); workers are told too."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.interrupted = False
        self.children: list[int] = []

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self.on_sigint)

    def on_sigint(self) -> None:
        if self.interrupted:
            print("duplexctl: still closing sessions…", file=sys.stderr)
            return
        self.interrupted = True
        print("duplexctl: interrupted: stopping arrivals, closing sessions", file=sys.stderr)
        self.stop.set()
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)


def run_load(config: LoadConfig) -> RunResult:
    """Validate, run, write and render; the CLI turns ``exit_code`` into the exit status."""
    config.validate()
    make_plan(config)  # bad audio, scenario or session file: exit 2 before any socket
    if config.uvloop:
        try:
            import uvloop

            return uvloop.run(_main(config))
        except ImportError:
            pass
    return asyncio.run(_main(config))


@contextlib.asynccontextmanager
async def target(config: LoadConfig) -> AsyncIterator[tuple[str, dict[str, Any] | None]]:
    """The server to load: ``--url``, or the embedded reference server (said in one line)."""
    from duplexctl.client.target import server_target

    overrides = config.server_overrides if config.url is None else None
    async with server_target(config.url, overrides) as found:
        if found.embedded is None:
            yield found.url, None
            return
        print(f"duplexctl: {found.line}", file=sys.stderr)
        echo = {
            k: (str(v) if not isinstance(v, int | float | str | bool | type(None)) else v)
            for k, v in dataclasses.asdict(found.embedded).items()
        }
        yield found.url, echo


async def _main(config: LoadConfig) -> RunResult:
    irq = Interrupts()
    irq.install()
    out = Path(config.out) if config.out else None
    async with target(config) as (url, embedded):
        extra: dict[str, Any] = {}
        if config.find_capacity:
            from duplexctl.load.search import find_capacity

            report = await find_capacity(config, url, embedded, irq)
        else:
            report = await run_step(config, url, embedded, irq, out=out)
        if (config.measure_slot_release or config.find_capacity) and not irq.interrupted:
            from duplexctl.load.search import measure_slot_release

            extra["slot_release"] = await measure_slot_release(config, url, irq.stop)
        report.update(extra)
    return finish(config, report, irq.interrupted, out)


def finish(
    config: LoadConfig, report: dict[str, Any], interrupted: bool, out: Path | None
) -> RunResult:
    """Judge the SLOs, write the files, print; exit code 130 / 1 / 0."""
    from duplexctl.load.results import recorder_of
    from duplexctl.report.slo import all_passed, evaluate, parse_slos

    slos = parse_slos(config.slos)
    code = 0
    if slos and not config.find_capacity:
        results = evaluate(slos, recorder_of(report).headline(), report["scalars"])
        report["slo"] = [r.to_dict() for r in results]
        if not all_passed(results):
            code = 1
    report["interrupted"] = interrupted
    if out is not None:
        write_outputs(out, report)
    if config.json_output:
        import json

        print(json.dumps(report, default=str))
    else:
        render_final(
            report, rich_table=Dashboard.choose(json_output=False, live=config.live) == "rich"
        )
        if out is not None:
            print(f"report written to {out}/report.json")
    if interrupted:
        code = 130
    return RunResult(report, code)


async def run_step(
    config: LoadConfig,
    url: str,
    embedded: dict[str, Any] | None,
    irq: Interrupts,
    *,
    out: Path | None,
    title: str = "duplexctl load",
    quiet: bool = False,
) -> dict[str, Any]:
    """One load run (or one capacity step) → its report."""
    mode = "off" if quiet else Dashboard.choose(json_output=config.json_output, live=config.live)
    dash = Dashboard(mode, title=title)
    t0 = time.monotonic()
    # the step ends by its own timer (which sets step_stop) or by Ctrl-C (irq.stop)
    step_stop = asyncio.Event()
    forward = asyncio.create_task(_forward(irq.stop, step_stop))
    dash.start()
    try:
        if config.workers <= 1:
            recorder, infos = await _in_process(config, url, step_stop, out, dash)
        else:
            recorder, infos = await _in_workers(config, url, irq, out, dash)
    finally:
        dash.stop()
        forward.cancel()
    wall = time.monotonic() - t0
    end_reasons = sorted({i.get("end_reason", "") for i in infos})
    report = build_report(
        recorder,
        config=config.echo(),
        workers=infos,
        wall_s=wall,
        chunk_ms=config.chunk_ms,
        url=None if embedded else url,
        embedded=embedded,
        capabilities=recorder.capabilities,
        interrupted=irq.interrupted,
        end_reason=",".join(end_reasons),
    )
    return report


async def _forward(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


async def _in_process(
    config: LoadConfig, url: str, stop: asyncio.Event, out: Path | None, dash: Dashboard
) -> tuple[Recorder, list[dict[str, Any]]]:
    origin = time.monotonic()
    rec = make_recorder(config, origin=origin, out_dir=out)
    task = asyncio.create_task(drive(config, url=url, origin=origin, stop=stop, recorder=rec))

    async def watch() -> None:
        while True:
            await asyncio.sleep(config.status_interval_s)
            dash.update(rec.live())

    watcher = asyncio.create_task(watch())
    try:
        recorder, info = await task
    finally:
        watcher.cancel()
        with contextlib.suppress(BaseException):
            await watcher
    return recorder, [info]


async def _in_workers(
    config: LoadConfig, url: str, irq: Interrupts, out: Path | None, dash: Dashboard
) -> tuple[Recorder, list[dict[str, Any]]]:
    ctx = mp.get_context("spawn")
    messages: Any = ctx.Queue()
    go = ctx.Event()
    origin_value: Any = ctx.Value("d", 0.0)
    n = config.workers
    procs = []
    for i in range(n):
        share = config.share(i, n)
        proc = ctx.Process(
            target=worker_main,
            args=(share, i, url, str(out) if out else None, messages, go, origin_value),
            name=f"duplexctl-load-{i}",
            daemon=True,
        )
        proc.start()
        procs.append(proc)
        irq.children.append(proc.pid)  # type: ignore[arg-type]
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
    end = config.warmup_s + (config.duration_s or 0) + WORKER_END_GRACE_S
    hard_deadline = time.monotonic() + max(end, 3600.0 if config.duration_s is None else end)
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
        elif kind == "done":
            done[index] = (msg[2], msg[3])
        elif kind == "error":
            errors.append(f"worker {index}: {msg[2]}")
            done[index] = ({}, {"worker": index, "error": msg[2]})
    for p in procs:
        await loop.run_in_executor(None, p.join, 10.0)
        if p.is_alive():
            p.kill()
    irq.children.clear()
    merged = Recorder(
        origin=origin,
        slice_s=config.slice_s,
        windows=_windows(config),
        worker=0,
    )
    infos = []
    for index in sorted(done):
        encoded, info = done[index]
        if encoded:
            merged.merge_encoded(encoded)
        infos.append(info)
    if out is not None:
        merge_jsonl(sorted(out.glob("turns.w*.jsonl")), out / "turns.jsonl")
        merge_jsonl(sorted(out.glob("sessions.w*.jsonl")), out / "sessions.jsonl")
    if errors and not done:
        raise BadInput("; ".join(errors))
    return merged, infos


def _windows(config: LoadConfig) -> Windows:
    from duplexctl.load.arrivals import Ramp

    return Windows(config.warmup_s, Ramp.parse(config.ramp).duration if config.ramp else 0.0)


def worker_main(
    config: LoadConfig,
    index: int,
    url: str,
    out: str | None,
    messages: Any,
    go: Any,
    origin_value: Any,
) -> None:
    """Entry point of a worker process: its share of the run, reported on ``messages``."""
    try:
        plan = make_plan(config)
    except Exception as exc:
        messages.put(("error", index, str(exc)))
        return
    messages.put(("ready", index))
    if not go.wait(WORKER_START_TIMEOUT_S):
        messages.put(("error", index, "never told to start"))
        return
    origin = float(origin_value.value)
    runner: Any = asyncio.run
    if config.uvloop:
        with contextlib.suppress(ImportError):
            import uvloop

            runner = uvloop.run
    try:
        encoded, info = runner(_worker_async(config, index, url, out, messages, origin, plan))
    except Exception as exc:
        messages.put(("error", index, f"{type(exc).__name__}: {exc}"))
        return
    messages.put(("done", index, encoded, info))


async def _worker_async(
    config: LoadConfig,
    index: int,
    url: str,
    out: str | None,
    messages: Any,
    origin: float,
    plan: Plan,
) -> tuple[dict[str, Any], dict[str, Any]]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await asyncio.sleep(max(0.0, origin - time.monotonic()))
    rec = make_recorder(config, origin=origin, worker=index, out_dir=Path(out) if out else None)
    task = asyncio.create_task(
        drive(config, url=url, origin=origin, stop=stop, worker=index, plan=plan, recorder=rec)
    )

    async def report_live() -> None:
        while True:
            await asyncio.sleep(config.status_interval_s)
            messages.put(("live", index, rec.live()))

    live = asyncio.create_task(report_live())
    try:
        recorder, info = await task
    finally:
        live.cancel()
    return recorder.encode(), info
