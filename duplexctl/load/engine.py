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

``--stagger`` (closed loop): user ``i`` of ``N`` begins its first session at ``i/N`` of one
pass of the conversation (:meth:`~duplexctl.load.script.Script.staggered`), so from the
start the users are spread over speaking, waiting and listening as they are later, not all
speaking their first turn at once (AIPerf's "virtual history").

The joining session (``--sweep``, ``--join-samples K``; closed loop): once the N users are in
steady state — the warm-up, the users' start spread and one first turn of the script after
the start (:meth:`Driver.steady_at`) — one extra session opens, speaks its first turn, hears
the answer and closes; then the next, K in all, one at a time, while the run lasts. Its
``handshake_ms``, first turn's ``ttfa_ms`` and ``turn_ms`` are its own figures
(``join_handshake_ms``, ``join_ttfa_ms``, ``join_turn_ms``: "what does the N+1st caller
wait"), recorded apart from the N users' figures and counts (:class:`JoinSink`). Only worker
0 runs it, so a run has one joining session at a time whatever ``--workers``.

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

from duplexctl.aio import cancel_and_wait
from duplexctl.audio.sendgrid import SendGrid
from duplexctl.behaviour.timeline import EnergyCache
from duplexctl.client.backoff import Backoff
from duplexctl.load.arrivals import ArrivalProcess, Ramp
from duplexctl.load.config import LoadConfig
from duplexctl.load.monitor import CpuMeter, LoopLagMonitor
from duplexctl.load.recorder import Recorder
from duplexctl.load.script import AppendCache, Script, build_script
from duplexctl.load.session import LoadSession, SessionRecord, Sink
from duplexctl.protocol.settings import SessionSettings
from duplexctl.report.turns import TurnRecord, TurnTimes
from duplexctl.rundir import Writes
from duplexctl.scenario.config import ReplayConfig, check_pauses

CLOSED_SPREAD_S: Final = 2.0
#: pause between one joining session's close and the next one's open
JOIN_GAP_S: Final = 0.5
#: the joining sessions' index in sessions.jsonl and turns.jsonl (the N users are 0 … N-1)
JOIN_INDEX: Final = -1


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
    script = script or build_script(
        list(config.conversation.inputs), rate=replay.settings.input_rate
    )
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
        self.energies = EnergyCache()
        self.send_grid = SendGrid(plan.replay.chunk_ms / 1000, config.execution.send_phases)
        shape = config.shape
        seed = shape.seed if shape.seed is not None else random.SystemRandom().randrange(2**32)
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
        c = self.config.shape
        if c.duration_s is not None:
            return self.origin + c.warmup_s + c.duration_s
        if c.ramp is not None and c.count is None:
            return self.origin + max(c.warmup_s, Ramp.parse(c.ramp).duration)
        return None

    def _session(
        self,
        index: int,
        attempt: int,
        scheduled: float | None,
        *,
        stagger: float | None = None,
        sink: Sink | None = None,
        stop: asyncio.Event | None = None,
    ) -> LoadSession:
        p, c, e = self.plan, self.config.shape, self.config.execution
        record = SessionRecord(worker=self.worker, index=index, attempt=attempt)
        record.t_scheduled = scheduled
        return LoadSession(
            url=self.url,
            config=p.replay,
            script=p.script,
            record=record,
            sink=self.recorder if sink is None else sink,
            mix=c.mix,
            rng=random.Random(self.rng.random()),
            appends=self.appends,
            energies=self.energies,
            send_grid=self.send_grid,
            open_timeout_s=e.open_timeout_s,
            close_timeout_s=e.close_timeout_s,
            api_key=self.config.target.api_key,
            stop=self.stop if stop is None else stop,
            stagger=stagger,
        )

    async def run(self) -> dict[str, Any]:
        """Run until the end; returns this worker's own figures (CPU, loop lag, seed)."""
        self.loop_lag.start()
        timer = asyncio.create_task(self._timer())
        if self.worker == 0 and self.config.capacity.joins and self.config.shape.closed_loop:
            self._spawn(self._joiners())
        try:
            if self.config.shape.closed_loop:
                await self._closed_loop()
            else:
                await self._open_loop()
            # arrivals are over; wait for what is in flight (it ends by stop or by itself)
            while self.tasks:
                await asyncio.wait(set(self.tasks))
        finally:
            await cancel_and_wait(timer)
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
        count = self.config.shape.count
        return count is None or self.started < count

    # -- closed loop -----------------------------------------------------------------------------

    async def _closed_loop(self) -> None:
        c = self.config.shape
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
        # --stagger: the user's first session begins at i/N of a pass (module docstring)
        stagger = self._stagger_of(i)
        if await _sleep_or_stop(self.stop, spread):
            return
        backoff, attempt = Backoff(), 0
        while not self.stop.is_set():
            if ramp is not None and ramp.level_at(time.monotonic() - self.origin) <= i:
                if await _sleep_or_stop(self.stop, 0.1):
                    return
                continue
            if not self._count_left():
                return
            self.started += 1
            attempt += 1
            session = self._session(i, attempt, time.monotonic(), stagger=stagger)
            record = await session.run()
            stagger = None  # only the first: the later sessions start their pass at its start
            if record.admission == "admitted":
                backoff.reset()
                continue
            if await _sleep_or_stop(self.stop, backoff.delay()):
                return

    def _stagger_of(self, i: int) -> float | None:
        """User ``i``'s place in the pass with ``--stagger`` (its global index among every
        worker's users, so the workers together spread them evenly), else None."""
        c = self.config.shape
        if not c.stagger:
            return None
        first, step, total = c.user_numbering or (0, 1, int(c.sessions or 0))
        return ((first + i * step) % total) / total if total > 1 else None

    # -- the joining session -------------------------------------------------------------------

    def steady_at(self) -> float:
        """When the N users are in steady state (monotonic): after the warm-up, their start
        spread and one first turn of the script (every user has started and spoken)."""
        first_turn_s, _ = self.plan.script.first_turn()
        return self.origin + self.config.shape.warmup_s + CLOSED_SPREAD_S + first_turn_s

    async def _joiners(self) -> None:
        """The joining sessions, one after the other (module docstring)."""
        if await _sleep_or_stop(self.stop, self.steady_at() - time.monotonic()):
            return
        for k in range(self.config.capacity.joins):
            if self.stop.is_set():
                return
            sink = JoinSink(self.recorder)
            done = asyncio.Event()
            sink.done = done
            watch = asyncio.create_task(_first_of(self.stop, done))
            session = self._session(JOIN_INDEX, k + 1, time.monotonic(), sink=sink, stop=done)
            try:
                await session.run()
            finally:
                watch.cancel()
            if await _sleep_or_stop(self.stop, JOIN_GAP_S):
                return

    # -- open loop ----------------------------------------------------------------------------

    async def _open_loop(self) -> None:
        c = self.config.shape
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


async def _first_of(source: asyncio.Event, target: asyncio.Event) -> None:
    """Set ``target`` when ``source`` is set (a joining session also ends with the run)."""
    await source.wait()
    target.set()


class JoinSink(Sink):
    """Where a joining session reports: only its own figures (``join_handshake_ms``, its
    first turn's ``join_ttfa_ms`` and ``join_turn_ms``) and counts (``join.*``), so the N
    users' figures, admissions and capacity are theirs alone; its appends' send lag is the
    generator's own validity and goes to the recorder like any other. ``done`` is set when
    its first turn is over: the session then closes."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.done: asyncio.Event | None = None
        self._turned = False

    def send_lag(self, t: float, lag_ms: float) -> None:
        self.recorder.send_lag(t, lag_ms)

    def session_admitted(self, record: SessionRecord, capabilities: dict[str, Any]) -> None:
        self.recorder.join_figure(time.monotonic(), "join_handshake_ms", record.handshake_ms)

    def turn(self, record: TurnRecord, times: TurnTimes, session: SessionRecord) -> None:
        if self._turned:
            return
        self._turned = True
        now = time.monotonic()
        for name in ("ttfa_ms", "turn_ms"):
            fig = record.figures.get(name)
            self.recorder.join_figure(now, f"join_{name}", None if fig is None else fig.value)
        self.recorder.counts["join.answered"] += int("ttfa_ms" in record.figures)
        self.recorder.join_turn(record, session)
        if self.done is not None:
            self.done.set()

    def session_finished(self, record: SessionRecord) -> None:
        self.recorder.joined(record)


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

    shape = config.shape
    ramp_end = Ramp.parse(shape.ramp).duration if shape.ramp else 0.0
    return Recorder(
        origin=origin,
        slice_s=config.output.slice_s,
        windows=Windows(shape.warmup_s, ramp_end),
        worker=worker,
        out_dir=out_dir,
        thresholds_ms=config.capacity.continuity_thresholds_ms,
        step=shape.step,
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
