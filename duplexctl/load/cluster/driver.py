"""The driver's side of a ``--ray`` run: place, prepare, start together, watch, merge.

1. **Place.** ``--workers N`` actors with Ray's SPREAD strategy, or ``--workers-per-node K``
   pinned to every live node (:func:`~duplexctl.load.cluster.connect.place`); one CPU each.
   Worker ``i`` of ``N`` gets :meth:`LoadConfig.share` — the split local workers get, seeds
   included, so the same command and seed offer the same load.
2. **Prepare.** Every actor decodes its audio first; then the driver reads each actor's
   clock :data:`CLOCK_SAMPLES` times and keeps the sample with the shortest round trip:
   ``offset = actor clock − (sent + received) / 2``. The common start is one instant of the
   driver's clock, given to each actor as ``origin + offset`` on its own clock, so every time
   slice of every worker is aligned on the driver's clock.
3. **Watch.** The driver polls every actor every :data:`POLL_S` (that poll is the heartbeat
   the actors' lifelines wait for): live snapshots feed the dashboard (totals and one line per
   node), each actor's per-second deltas are added up into the cluster's seconds
   (:mod:`~duplexctl.load.cluster.seconds`: the dashboard's last second, each node's CPU,
   ``seconds.jsonl``), checkpoints of the recorders are kept, JSONL lines are appended to
   ``--out``. Ctrl-C is forwarded as :meth:`LoadWorker.stop`.
4. **Faults.** Every remote call is bounded (:data:`CALL_TIMEOUT_S`). An actor whose poll
   fails with a Ray error, or that has not answered for :data:`LOST_AFTER_S`, is lost: the
   run goes on, the loss is reported (node, sessions lost, when) and its last checkpoint is
   merged; ``load`` then exits 1.
5. **Merge.** :func:`duplexctl.load.workers.merge_parts`, the local workers' exact merge.
   With ``--out`` each worker's own run is also saved (``workers/wN/report.json``), so
   ``duplexctl report out/workers/w*`` reproduces the merged histograms bucket for bucket.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from duplexctl.errors import BadInput
from duplexctl.export import live as live_export
from duplexctl.load.cluster.actor import HEARTBEAT_TIMEOUT_S, LoadWorker
from duplexctl.load.cluster.connect import ACTOR_CONCURRENCY, ACTOR_CPUS, connect, place
from duplexctl.load.cluster.seconds import ClusterSeconds
from duplexctl.load.config import LoadConfig
from duplexctl.load.dashboard import Dashboard, combine
from duplexctl.load.interrupts import Interrupts
from duplexctl.load.recorder import Recorder, live_percentiles
from duplexctl.load.workers import merge_parts
from duplexctl.report.load_report import build_report, write_outputs
from duplexctl.report.tally import RunTally
from duplexctl.rundir import JsonLines, Writes

POLL_S: Final = 0.5
CALL_TIMEOUT_S: Final = 10.0
PREPARE_TIMEOUT_S: Final = 120.0
#: An actor that has not answered a poll for this long is counted lost (and killed); the
#: actor gives up on the driver after the same silence.
LOST_AFTER_S: Final = HEARTBEAT_TIMEOUT_S
CLOCK_SAMPLES: Final = 5
START_MARGIN_S: Final = 0.5
#: After the run's end (or Ctrl-C): the time the actors get to close and report.
END_GRACE_S: Final = 60.0


@dataclass(slots=True)
class Member:
    """One worker actor as the driver sees it."""

    index: int
    handle: Any
    share: LoadConfig
    where: dict[str, Any] = field(default_factory=dict)
    offset_s: float = 0.0
    rtt_s: float = 0.0
    live: dict[str, Any] = field(default_factory=dict)
    cpu_percent: float = 0.0
    checkpoint: dict[str, Any] | None = None
    done: tuple[dict[str, Any], dict[str, Any]] | None = None
    error: str | None = None
    lost: dict[str, Any] | None = None
    last_answer: float = field(default_factory=time.monotonic)
    pending: Any = None

    slices: dict[int, dict[str, Any]] = field(default_factory=dict)

    def absorb(self, part: dict[str, Any]) -> None:
        """A checkpoint: the recorder with only its slices that may have changed; joined to
        the slices already held (all of them anew after the slice length doubled)."""
        slicer = part["slicer"]
        if self.checkpoint is None or self.checkpoint["slicer"]["slice_s"] != slicer["slice_s"]:
            self.slices = {}
        self.slices.update((entry["index"], entry) for entry in slicer["slices"])
        self.checkpoint = part

    def last_checkpoint(self) -> dict[str, Any]:
        """The whole recorder as of the last checkpoint ({} before the first)."""
        if self.checkpoint is None:
            return {}
        slicer = dict(
            self.checkpoint["slicer"], slices=[self.slices[i] for i in sorted(self.slices)]
        )
        return dict(self.checkpoint, slicer=slicer)

    @property
    def node(self) -> str:
        return str(self.where.get("node", "?"))

    @property
    def finished(self) -> bool:
        return self.done is not None or self.lost is not None or self.error is not None


async def call(ref: Any, timeout_s: float = CALL_TIMEOUT_S) -> Any:
    """One remote call's result, waited for at most ``timeout_s`` (TimeoutError after)."""
    return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout_s)


def short(node: str) -> str:
    """A node id as people read it (Ray's ids are 56 hex digits)."""
    return node[:12]


def own_pacing(encoded: dict[str, Any], chunk_ms: int) -> dict[str, Any]:
    """One worker's own send-lag p99 and whether it kept pace (p99 within one chunk, the
    run's rule): the report flags ``invalid_pacing`` by node from these."""
    lag = RunTally.decode(encoded).headline().get("send_lag_ms")
    p99 = lag.percentile(99) if lag is not None and lag.count else None
    return {"send_lag_p99_ms": p99, "invalid_pacing": p99 is not None and p99 > chunk_ms}


class ClusterRun:
    """One step of a ``--ray`` run (see the module docstring)."""

    def __init__(
        self,
        config: LoadConfig,
        url: str,
        out: Path | None,
        dash: Dashboard,
        writes: Writes | None = None,
    ) -> None:
        self.config = config
        self.url = url
        self.out = out
        self.dash = dash
        # every file the driver writes fails into the run's writes (rundir.py): the first
        # failure stops the run as Ctrl-C does and it ends with exit 4
        self.writes = writes if writes is not None else Writes()
        self.ray = connect(config.execution.ray or "auto")
        self.members: list[Member] = []
        self.seconds = ClusterSeconds(out, self.writes)
        self._jsonl: dict[str, JsonLines] = {}  # the actors' JSONL lines, appended here
        self.origin: float | None = None
        self.chunk_ms = config.chunk_ms

    # -- start -------------------------------------------------------------------------------

    def spawn(self) -> None:
        ray = self.ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        placement = place(
            ray.nodes(),
            workers=self.config.execution.workers,
            per_node=self.config.execution.workers_per_node,
        )
        actor = ray.remote(num_cpus=ACTOR_CPUS, max_concurrency=ACTOR_CONCURRENCY)(LoadWorker)
        n = placement.workers
        for index, node in enumerate(placement.nodes):
            strategy: Any = (
                "SPREAD" if node is None else NodeAffinitySchedulingStrategy(node, soft=False)
            )
            # detached: Ray must not kill them with the driver's job; the heartbeat does
            handle = actor.options(lifetime="detached", scheduling_strategy=strategy).remote()
            self.members.append(Member(index, handle, self.config.share(index, n)))

    async def prepare(self) -> None:
        async def one(m: Member) -> None:
            m.where = await call(m.handle.prepare.remote(m.share, m.index, self.url),
                                 PREPARE_TIMEOUT_S)  # fmt: skip
            best: tuple[float, float] | None = None
            for _ in range(CLOCK_SAMPLES):
                sent = time.monotonic()
                theirs = await call(m.handle.clock.remote())
                received = time.monotonic()
                rtt = received - sent
                if best is None or rtt < best[0]:
                    best = (rtt, theirs - (sent + received) / 2)
            assert best is not None
            m.rtt_s, m.offset_s = best

        results = await asyncio.gather(*(one(m) for m in self.members), return_exceptions=True)
        failed = [
            f"worker {m.index}: {type(r).__name__}: {str(r).strip().splitlines()[0] if str(r).strip() else 'no answer'}"
            for m, r in zip(self.members, results, strict=True)
            if isinstance(r, BaseException)
        ]
        if failed:
            raise BadInput("Ray workers failed to start: " + "; ".join(failed))

    async def start(self) -> float:
        origin = time.monotonic() + START_MARGIN_S + max(m.rtt_s for m in self.members)
        results = await asyncio.gather(
            *(call(m.handle.start.remote(origin + m.offset_s)) for m in self.members),
            return_exceptions=True,
        )
        self.origin = origin
        for m, result in zip(self.members, results, strict=True):
            if isinstance(result, BaseException):  # died between prepare and start
                self.lose(m, f"could not start ({type(result).__name__})")
        return origin

    # -- watch -------------------------------------------------------------------------------

    async def poll_once(self) -> None:
        """One beat to every running actor; what they sent, dispatched."""
        ray = self.ray
        now = time.monotonic()
        running = [m for m in self.members if not m.finished]
        if not running:
            return
        for m in running:
            if m.pending is None:
                m.pending = asyncio.wrap_future(m.handle.poll.remote().future())
        await asyncio.wait([m.pending for m in running], timeout=POLL_S)
        # one round per POLL_S, however fast the answers came (a round that returned at
        # once and went again polled hundreds of times a second: a core's worth of CPU)
        await asyncio.sleep(max(0.0, POLL_S - (time.monotonic() - now)))
        for m in running:
            if not m.pending.done():
                # before the start, prepare()'s own bound applies (actors may be slow to boot)
                if self.origin is not None and now - m.last_answer > LOST_AFTER_S:
                    self.lose(m, f"no answer for {LOST_AFTER_S:g} s")
                continue
            future, m.pending = m.pending, None
            try:
                messages = future.result()
            except ray.exceptions.RayError as exc:
                self.lose(m, type(exc).__name__)
                continue
            m.last_answer = time.monotonic()
            for message in messages:
                self.dispatch(m, message)
        self.seconds.complete(m.index for m in self.members if not m.finished)
        self.show()

    def dispatch(self, m: Member, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "live":
            m.live = message[2]
        elif kind == "cpu":
            m.cpu_percent = message[2]
        elif kind == "second":
            self.seconds.add(m.index, message[2])
        elif kind == "export":  # --prometheus-rw: pushed by this process, labelled by node
            live_export.observe(m.index, message[2], node=short(m.node))
        elif kind == "checkpoint":
            m.absorb(message[2])
        elif kind == "done":
            m.done = (message[2], message[3])
        elif kind == "error":
            m.error = message[2]
        elif kind == "jsonl" and self.out is not None:
            name = message[1]
            if name not in self._jsonl:
                self._jsonl[name] = JsonLines(self.out / name, self.writes, append=True)
            self._jsonl[name].write(message[2].encode())

    def lose(self, m: Member, reason: str) -> None:
        """``m`` is gone mid-run: note when, where and how many sessions went with it."""
        at = None if self.origin is None else round(time.monotonic() - self.origin, 3)
        m.lost = {
            "node": m.node,
            "at_s": at,
            "sessions_lost": int(m.live.get("active", 0)),
            "reason": reason,
        }
        with contextlib.suppress(Exception):
            self.ray.kill(m.handle, no_restart=True)

    def show(self) -> None:
        last = self.seconds.last
        cpu = {int(i): w["cpu_percent"] for i, w in (last or {}).get("workers", {}).items()}
        alive = [m for m in self.members if m.lost is None and m.live]
        nodes: dict[str, dict[str, Any]] = {}
        for node in sorted({m.node for m in alive}):
            mine = [m for m in alive if m.node == node]
            snap = combine(m.live for m in mine)
            (lag99,) = live_percentiles(snap["send_lag_window"], (99,))
            nodes[short(node)] = {
                "workers": len(mine),
                "active": snap["active"],
                "send_lag_p99_ms": lag99,
                # over the last complete second (before the first: since the actor began)
                "cpu_percent": sum(cpu.get(m.index, m.cpu_percent) for m in mine),
                "pacing_ok": lag99 is None or lag99 <= self.chunk_ms,
            }
        lost = [m for m in self.members if m.lost is not None]
        for m in lost:
            nodes.setdefault(short(m.node) + " (lost)", {"lost": True, "workers": 0})
        self.dash.update(combine(m.live for m in alive), nodes=nodes, second=last)

    async def watch(self, stop: asyncio.Event) -> None:
        """Poll until every actor has finished; forward a stop (Ctrl-C) once — without
        waiting for its answers, so the beats go on while the actors close their sessions."""
        c = self.config.shape
        assert self.origin is not None
        run_end = c.warmup_s + (c.duration_s if c.duration_s is not None else 3600.0)
        deadline = self.origin + run_end + END_GRACE_S
        told = False
        while not all(m.finished for m in self.members):
            if stop.is_set() and not told:
                told = True
                deadline = min(deadline, time.monotonic() + END_GRACE_S)
                for m in self.members:
                    if not m.finished:
                        m.handle.stop.remote()  # its failure shows in the next poll
            if time.monotonic() > deadline:
                for m in self.members:
                    if not m.finished:
                        self.lose(m, "did not finish in time")
                break
            await self.poll_once()

    async def poll_until(self, task: asyncio.Future[Any]) -> Any:
        """Await ``task`` while beating (the actors' lifelines must not starve meanwhile)."""
        while not task.done():
            await asyncio.wait([task], timeout=POLL_S)
            if not task.done():
                await self.poll_once()
        return task.result()

    def close(self) -> None:
        for m in self.members:
            with contextlib.suppress(Exception):
                self.ray.kill(m.handle, no_restart=True)
        for lines in self._jsonl.values():  # every line is written already (unbuffered)
            lines.close()
        self.seconds.close()

    # -- merge -------------------------------------------------------------------------------

    def infos(self) -> dict[int, tuple[dict[str, Any], dict[str, Any]]]:
        """Each worker's (encoded recorder, info); a lost one's last checkpoint."""
        parts: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        for m in self.members:
            where = {
                "node": m.node,
                "node_ip": m.where.get("node_ip"),
                "host": m.where.get("host"),
                "clock_offset_ms": round(m.offset_s * 1000, 3),
                "clock_rtt_ms": round(m.rtt_s * 1000, 3),
            }
            if m.done is not None:
                encoded, info = m.done
            elif m.lost is not None:
                encoded, info = m.last_checkpoint(), {"worker": m.index, "lost": m.lost}
            else:
                encoded, info = {}, {"worker": m.index, "error": m.error}
            info = {**info, **where}
            if encoded:
                info.update(own_pacing(encoded, self.chunk_ms))
            parts[m.index] = (encoded, info)
        return parts

    def save_worker_runs(
        self, parts: dict[int, tuple[dict[str, Any], dict[str, Any]]], wall_s: float
    ) -> None:
        """Each worker's own run, as ``duplexctl report`` reads it: ``workers/wN/``."""
        if self.out is None:
            return
        for index, (encoded, info) in parts.items():
            if not encoded:
                continue
            share = self.members[index].share
            report = build_report(
                RunTally.decode(encoded),
                config=share.echo(),
                workers=[info],
                wall_s=wall_s,
                chunk_ms=self.chunk_ms,
                url=self.url,
            )
            own = self.out / "workers" / f"w{index}"
            try:
                own.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                self.writes.failed(own, exc)
                return
            write_outputs(own, report, self.writes)


async def in_cluster(
    config: LoadConfig,
    url: str,
    irq: Interrupts,
    out: Path | None,
    dash: Dashboard,
    writes: Writes | None = None,
) -> tuple[Recorder, list[dict[str, Any]]]:
    """Run ``config`` on the Ray cluster ``config.execution.ray``; the workers' recorders merged
    exactly, each info naming its node (and, for a lost worker, the loss). A file of ``out``
    that cannot be written goes to ``writes`` (whose stop, the caller's, ends the run)."""
    run = ClusterRun(config, url, out, dash, writes)
    t0 = time.monotonic()
    try:
        run.spawn()
        await run.poll_until(asyncio.ensure_future(run.prepare()))
        if irq.stop.is_set():
            raise KeyboardInterrupt
        origin = await run.start()
        await run.watch(irq.stop)
        run.seconds.complete(())  # whatever is left of the lost or late
    finally:
        run.close()
    parts = run.infos()
    run.save_worker_runs(parts, time.monotonic() - t0)
    return merge_parts(config, origin, parts, out, run.writes)
