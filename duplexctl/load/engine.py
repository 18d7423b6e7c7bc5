"""Drive one process's share of a load run: arrivals, client-side slots, stopping.

Closed loop (``--sessions N``): N virtual users; each opens a session, speaks one pass of the
script, closes it cleanly and starts over with a new session, so admission and slot release
are exercised all run long. A user whose open is rejected backs off (0.25 s doubling to 4 s,
jittered, docs/protocol.md §7.6) and tries again. With ``--ramp`` user ``i`` is active while the
ramp's target is above ``i``. First starts are spread over ``CLOSED_SPREAD_S`` so a hundred
users do not speak in lock-step; every session's appends go out on one of the process's
send-grid phases (:mod:`duplexctl.audio.sendgrid`), so the loop wakes a few times per chunk
period, not once per session.

Open loop (``--rate R``): sessions start on the arrival schedule of
:class:`~duplexctl.load.arrivals.ArrivalProcess`, whatever the server does — that is what
exposes queueing and rejections. ``--max-concurrency`` caps sessions in flight *client side*;
an arrival that waits for a slot records the wait as ``client_queue_ms`` (scheduled arrival
to session start), and its first turn's latencies are also recorded with the wait added
(``ttfa_with_queue_ms``), so coordinated omission is visible instead of hidden.

Timing: ``--warmup`` runs first and is excluded from the headline figures; ``--duration``
is the measured time after it. The run stops at the end of the duration, when ``--count``
sessions have been attempted and finished, or on ``stop`` (Ctrl-C): arrivals stop, every
running session is closed with ``session.close``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from duplexctl.audio.sendgrid import SendGrid
from duplexctl.load.arrivals import ArrivalProcess, Ramp
from duplexctl.load.config import LoadConfig
from duplexctl.load.monitor import CpuMeter, LoopLagMonitor
from duplexctl.load.recorder import Recorder
from duplexctl.load.script import AppendCache, Script, build_script
from duplexctl.load.session import LoadSession, SessionRecord
from duplexctl.protocol.settings import SessionSettings
from duplexctl.rundir import Writes
from duplexctl.scenario.config import ReplayConfig, check_pauses

CLOSED_SPREAD_S: Final = 2.0
BACKOFF_MIN_S: Final = 0.25
BACKOFF_MAX_S: Final = 4.0


@dataclass(slots=True)
class Plan:
    """Resolved once per process: what to say, and the runner config every session uses
    (how to open sessions, how turns end, pacing, playback, timeouts)."""

    script: Script
    replay: ReplayConfig

    @property
    def settings(self) -> SessionSettings:
        return self.replay.settings


def make_plan(config: LoadConfig, script: Script | None = None) -> Plan:
    """The runner config every session uses, from the settings the config resolved (one
    resolver for every command: defaults < scenario < ``--session`` < flags), and the
    script, its audio decoded at the session's input rate."""
    replay = ReplayConfig.from_run(config.settings)
    script = script or build_script(config.inputs, rate=replay.settings.input_rate)
    check_pauses(script.scenario, replay)  # a pause the server VAD would end: exit 2
    return Plan(script=script, replay=replay)


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds``; True if ``stop`` was set meanwhile (returns at once then)."""
    if seconds <= 0:
        return stop.is_set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


class Driver:
    """One process's part of a run (see the module docstring)."""

    def __init__(
        self,
        config: LoadConfig,
        *,
        url: str,
        origin: float,
        recorder: Recorder,
        plan: Plan,
        stop: asyncio.Event,
        worker: int = 0,
    ) -> None:
        self.config = config
        self.url = url
        self.origin = origin
        self.recorder = recorder
        self.plan = plan
        self.stop = stop
        self.worker = worker
        self.appends = AppendCache(plan.settings.input_format_canonical)
        self.send_grid = SendGrid(plan.replay.chunk_ms / 1000, config.send_phases)
        seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**32)
        self.seed = seed
        self.rng = random.Random(seed)
        self.started = 0
        self.tasks: set[asyncio.Task[Any]] = set()
        self.cpu = CpuMeter()
        self.loop_lag = LoopLagMonitor(recorder.loop_lag, grid=self.send_grid)
        self.end_reason = ""

    # -- timing ------------------------------------------------------------------------------

    @property
    def end_at(self) -> float | None:
        """Monotonic end of the run (None: ends by count or ramp alone)."""
        c = self.config
        if c.duration_s is not None:
            return self.origin + c.warmup_s + c.duration_s
        if c.ramp is not None and c.count is None:
            return self.origin + max(c.warmup_s, Ramp.parse(c.ramp).duration)
        return None

    def _session(self, index: int, attempt: int, scheduled: float | None) -> LoadSession:
        p, c = self.plan, self.config
        record = SessionRecord(worker=self.worker, index=index, attempt=attempt)
        record.t_scheduled = scheduled
        return LoadSession(
            url=self.url,
            config=p.replay,
            script=p.script,
            record=record,
            sink=self.recorder,
            mix=c.mix,
            rng=random.Random(self.rng.random()),
            appends=self.appends,
            send_grid=self.send_grid,
            open_timeout_s=c.open_timeout_s,
            close_timeout_s=c.close_timeout_s,
            api_key=c.api_key,
            stop=self.stop,
        )

    async def run(self) -> dict[str, Any]:
        """Run until the end; returns this worker's own figures (CPU, loop lag, seed)."""
        self.loop_lag.start()
        timer = asyncio.create_task(self._timer())
        try:
            if self.config.closed_loop:
                await self._closed_loop()
            else:
                await self._open_loop()
            # arrivals are over; wait for what is in flight (it ends by stop or by itself)
            while self.tasks:
                await asyncio.wait(set(self.tasks))
        finally:
            timer.cancel()
            with contextlib.suppress(BaseException):
                await timer
            await self.loop_lag.stop()
        cpu_s, wall_s = self.cpu.seconds()
        return {
            "worker": self.worker,
            "seed": self.seed,
            "cpu_s": round(cpu_s, 3),
            "wall_s": round(wall_s, 3),
            "cpu_percent": round(100 * cpu_s / wall_s, 1) if wall_s > 0 else 0.0,
            "loop_lag_max_ms": round(self.loop_lag.max_ms, 3),
            "sessions_started": self.started,
            "end_reason": self.end_reason or ("stopped" if self.stop.is_set() else "done"),
        }

    async def _timer(self) -> None:
        end = self.end_at
        if end is None:
            return
        if not await _sleep_or_stop(self.stop, end - time.monotonic()):
            self.end_reason = "duration"
            self.stop.set()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def _count_left(self) -> bool:
        return self.config.count is None or self.started < self.config.count

    # -- closed loop -----------------------------------------------------------------------------

    async def _closed_loop(self) -> None:
        c = self.config
        ramp = Ramp.parse(c.ramp) if c.ramp else None
        users = int(ramp.peak) if ramp is not None else int(c.sessions or 0)
        for i in range(users):
            self._spawn(self._user(i, users, ramp))
        while self.tasks:
            await asyncio.wait(set(self.tasks))
        if not self._count_left():
            self.end_reason = self.end_reason or "count"

    async def _user(self, i: int, users: int, ramp: Ramp | None) -> None:
        spread = CLOSED_SPREAD_S * i / users if users > 1 and ramp is None else 0.0
        if await _sleep_or_stop(self.stop, spread):
            return
        backoff, attempt = BACKOFF_MIN_S, 0
        while not self.stop.is_set():
            if ramp is not None and ramp.level_at(time.monotonic() - self.origin) <= i:
                if await _sleep_or_stop(self.stop, 0.1):
                    return
                continue
            if not self._count_left():
                return
            self.started += 1
            attempt += 1
            session = self._session(i, attempt, time.monotonic())
            record = await session.run()
            if record.admission == "admitted":
                backoff = BACKOFF_MIN_S
                continue
            if await _sleep_or_stop(self.stop, backoff * random.uniform(0.5, 1.5)):
                return
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    # -- open loop ----------------------------------------------------------------------------

    async def _open_loop(self) -> None:
        c = self.config
        process = ArrivalProcess(c.arrival, c.burstiness, c.seed)  # type: ignore[arg-type]
        target: float | Ramp = Ramp.parse(c.ramp) if c.ramp else float(c.rate or 0)
        horizon = None
        if self.end_at is not None:
            horizon = self.end_at - self.origin
        slots = asyncio.Semaphore(c.max_concurrency) if c.max_concurrency else None
        for index, offset in enumerate(process.times(target, duration=horizon, count=c.count)):
            due = self.origin + offset
            if await _sleep_or_stop(self.stop, due - time.monotonic()):
                break
            self.started += 1
            self._spawn(self._arrival(index, due, slots))
        else:
            if c.count is not None:
                self.end_reason = "count"

    async def _arrival(self, index: int, due: float, slots: asyncio.Semaphore | None) -> None:
        queued = slots is not None and slots.locked()  # every client-side slot is taken
        if queued:
            self.recorder.counts["client_queued"] += 1
            self.recorder.waiting += 1
        if slots is not None:
            acquire = asyncio.ensure_future(slots.acquire())
            stopped = asyncio.ensure_future(self.stop.wait())
            await asyncio.wait({acquire, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if queued:
                self.recorder.waiting -= 1
            if not acquire.done() or acquire.cancelled():
                acquire.cancel()
                return
        try:
            session = self._session(index, 1, due)
            session.record.client_queue_ms = round(max(0.0, time.monotonic() - due) * 1000, 3)
            await session.run()
        finally:
            if slots is not None:
                slots.release()


def make_recorder(
    config: LoadConfig,
    *,
    origin: float,
    worker: int = 0,
    out_dir: Path | None = None,
    writes: Writes | None = None,
) -> Recorder:
    """The recorder of one process, with the run's slices and phase windows."""
    from duplexctl.report.slices import Windows

    ramp_end = Ramp.parse(config.ramp).duration if config.ramp else 0.0
    return Recorder(
        origin=origin,
        slice_s=config.slice_s,
        windows=Windows(config.warmup_s, ramp_end),
        worker=worker,
        out_dir=out_dir,
        writes=writes,
    )


async def drive(
    config: LoadConfig,
    *,
    url: str,
    origin: float,
    stop: asyncio.Event,
    worker: int = 0,
    out_dir: Path | None = None,
    plan: Plan | None = None,
    recorder: Recorder | None = None,
) -> tuple[Recorder, dict[str, Any]]:
    """Run one process's share; returns its recorder and own figures."""
    plan = plan or make_plan(config)
    if recorder is None:
        recorder = make_recorder(config, origin=origin, worker=worker, out_dir=out_dir)
    driver = Driver(
        config, url=url, origin=origin, recorder=recorder, plan=plan, stop=stop, worker=worker
    )
    try:
        info = await driver.run()
    finally:
        recorder.close()
    return recorder, info
