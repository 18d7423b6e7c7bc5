"""``--find-capacity`` and ``--measure-slot-release``: where a server stops keeping up.

Capacity search. Each step is a complete, timed load run (``--step-duration``) at one
offered level — concurrent sessions (closed loop) or sessions/s (``--rate`` given: open
loop) — judged by the run's own criteria: no capacity rejections, no failed attempts
(refused, timed out …), every ``--slo`` held, and the client's own pacing valid (a step the
client could not pace says nothing about the server, so it fails as ``invalid_pacing``).

A step is judged only once it has something to judge (:func:`unjudged`): its admitted
sessions completed at least one turn, and every figure an ``--slo`` names has at least one
sample (a percentile from few turns is their maximum: a pass means every turn met it).
A step that has not is run again at the same level for twice as long, at most
``MAX_STEP_EXTENSIONS`` times (up to 4 × ``--step-duration``), and then fails as "too few
turns to judge"; a step that already failed on admission is not extended (more time would
not change its verdict). Each try is kept in the step's ``runs``. :class:`~duplexctl.load.capacity.CapacitySearch`
proposes the levels: up geometrically until the first failure, then bisection. The report
says the largest level that met everything, where capacity rejections began, and how the
first failing step failed (its reason, admission codes and ttfa).

Slot release (docs/metrics.md ``slot_release_ms``). Fill the server to its admission limit with
idle sessions, then end one — with ``session.close``, and then by killing its socket — and
retry opening a new session every ``POLL_S`` until one is admitted. The time from the end to
the admitting ``session.created`` is ``slot_release_ms`` (resolution: one poll period).
After a drop it approaches the server's disconnect grace; the wait is bounded by
``SLOT_RELEASE_LIMIT_S``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from duplexctl.client.connection import (
    AdmissionRejected,
    ConnectionOptions,
    DuplexConnection,
    OpenFailed,
)
from duplexctl.export import live as live_export
from duplexctl.load.capacity import CapacitySearch
from duplexctl.load.config import LoadConfig
from duplexctl.load.engine import make_plan
from duplexctl.load.interrupts import Interrupts
from duplexctl.load.step import run_step
from duplexctl.report import steps as steps_rules
from duplexctl.report.load_report import tally_of
from duplexctl.report.slo import Slo, SloResult, evaluate, parse_slos

POLL_S: Final = 0.025
SLOT_RELEASE_LIMIT_S: Final = 45.0
STEP_PAUSE_S: Final = 1.0
#: a step that cannot be judged runs again for twice as long at most this many times (so at
#: most 4 × --step-duration), then fails as "too few turns to judge"
MAX_STEP_EXTENSIONS: Final = 2
#: Most idle sessions opened to find a full server (bounds the slot-release measurement).
MAX_HOLDERS: Final = 1024
#: while the slot-release wait goes on, a line this often says so (the live view is stopped)
PROGRESS_EVERY_S: Final = 5.0


async def find_capacity(
    config: LoadConfig,
    url: str,
    embedded: dict[str, Any] | None,
    irq: Interrupts,
    on_step: Callable[[int, float, float], None] | None = None,
) -> dict[str, Any]:
    """The search; ``on_step(level, start, end)`` (monotonic seconds) after each step (the
    server metrics scraped during it are summarised per step)."""
    judged = config.capacity
    open_loop = config.shape.rate is not None
    unit = "sessions/s" if open_loop else "sessions"
    search = CapacitySearch(start=judged.capacity_start, max_level=judged.max_level)
    slos = parse_slos(list(judged.slos))
    steps: list[dict[str, Any]] = []
    reports: dict[int, dict[str, Any]] = {}
    tried: list[dict[str, Any]] = []  # every run of every step: the search's totals
    rejections_began: int | None = None
    began = time.monotonic()
    while (level := search.next_level()) is not None and not irq.stop.is_set():
        step = await judged_step(
            config, level, url, embedded, irq, slos, "capacity step", unit, tried, on_step,
            open_loop=open_loop,
        )  # fmt: skip
        if irq.stop.is_set():  # Ctrl-C, or a file that could not be written
            break
        report, results, runs, duration = step.report, step.results, step.runs, step.duration_s
        rejected = report["admission"]["by_kind"].get("rejected_capacity", 0)
        if rejected and (rejections_began is None or level < rejections_began):
            rejections_began = level
        reasons = step.reasons
        passed = not reasons
        search.record(level, passed, "; ".join(reasons))
        ttfa = report["figures"].get("ttfa_ms", {})
        steps.append(
            {
                "level": level,
                "passed": passed,
                "reason": "; ".join(reasons),
                "ttfa_p95": ttfa.get("p95"),
                "ttfa_n": ttfa.get("n"),
                "admitted": report["admission"]["by_kind"].get("admitted", 0),
                "rejection_rate": report["admission"]["rejection_rate"],
                "observed_capacity": report["admission"]["observed_capacity"],
                "admission": report["admission"]["by_code"],
                "advertised_limit": report["admission"]["advertised_limit"],
                "slo": [r.to_dict() for r in results],
                "turns": report["turns"]["count"],
                "duration_s": duration,
                "runs": runs,
                # --ray: where the step ran (node id → sessions started there)
                "nodes": sessions_by_node(report["workers"]),
            }
        )
        reports[level] = report
        await asyncio.sleep(STEP_PAUSE_S)
    wall = time.monotonic() - began
    result = search.result()
    best = result.largest_pass
    base = reports.get(best) if best is not None else None
    figures_from = best
    if base is None:
        figures_from = max(reports) if reports else None
        base = reports[figures_from] if figures_from is not None else {}
    report = dict(base)
    at_best: list[SloResult] = []
    if best is not None:
        at_best = evaluate(slos, tally_of(base).headline(), base["scalars"])
        report["slo"] = [r.to_dict() for r in at_best]
    first_fail = reports.get(result.first_fail) if result.first_fail is not None else None
    report["capacity_search"] = {
        "unit": unit,
        "largest_pass": best,
        "first_fail": result.first_fail,
        "fail_reason": result.reason,
        "rejections_began_at": rejections_began,
        "failure": None
        if first_fail is None
        else {
            "admission": first_fail["admission"],
            "ttfa_ms": first_fail["figures"].get("ttfa_ms"),
            "turn_outcomes": first_fail["turns"]["outcomes"],
            "errors": first_fail["errors"],
        },
        "steps": steps,
        "step_duration_s": judged.step_duration_s,
        "criteria": steps_rules.criteria(list(judged.slos)),
        # the level whose step's figures the report's own sections hold (the answer's)
        "figures_from": figures_from,
        "totals": search_totals(tried, wall),
    }
    limits = [s["advertised_limit"] for s in steps if s.get("advertised_limit") is not None]
    report["capacity_search"]["advertised_limit"] = max(limits) if limits else None
    report["capacity_search"]["answer"] = answer(report["capacity_search"], at_best)
    return report


@dataclass(slots=True)
class JudgedStep:
    """One step (a capacity level, a sweep level) run until it could be judged."""

    report: dict[str, Any]
    results: list[SloResult]
    missing: str | None  # why it could not be judged after every extension, or None
    runs: list[dict[str, Any]]  # each try: {duration_s, turns}
    duration_s: float  # the judged try's
    started: float  # monotonic start of the judged try
    tried: list[dict[str, Any]] = field(default_factory=list)  # every try's report

    @property
    def reasons(self) -> list[str]:
        return steps_rules.reasons(self.report, self.results, self.missing, self.runs)


async def judged_step(
    config: LoadConfig,
    level: int,
    url: str,
    embedded: dict[str, Any] | None,
    irq: Interrupts,
    slos: Sequence[Slo],
    name: str,
    unit: str,
    tried_so_far: list[dict[str, Any]],
    on_step: Callable[[int, float, float], None] | None,
    *,
    open_loop: bool = False,
    out: Path | None = None,
    join_samples: int | None = None,
) -> JudgedStep:
    """Run one step at ``level`` until it can be judged (the module docstring's rule):
    again for twice as long, at most :data:`MAX_STEP_EXTENSIONS` times, unless it already
    failed on admission. Every try's report is added to ``tried_so_far`` (the totals);
    ``on_step(level, start, end)`` follows the step (the server metrics per step).
    ``join_samples``: sessions that join the level's N in steady state (a sweep's)."""
    what = f"{name} {level} {unit}"
    title = f"{name}: {level} {unit}"  # the live view's title
    duration = config.capacity.step_duration_s
    runs: list[dict[str, Any]] = []
    tried: list[dict[str, Any]] = []
    while True:
        step_cfg = dataclasses.replace(
            config,
            capacity=dataclasses.replace(
                config.capacity, find_capacity=False, sweep=None, join_samples=join_samples
            ),
            shape=dataclasses.replace(
                config.shape,
                sessions=None if open_loop else level,
                rate=float(level) if open_loop else None,
                duration_s=duration,
                count=None,
                step=(level, len(runs) + 1),
            ),
        )
        started = time.monotonic()
        live_export.step(level)  # --prometheus-rw: this step's series carry level=...
        report = await run_step(step_cfg, url, embedded, irq, out=out, title=title)
        results = steps_rules.results_of(report, slos)
        missing = steps_rules.unjudged(report, results)
        stopped = irq.stop.is_set()  # Ctrl-C, or a file that could not be written
        if not stopped:
            runs.append({"duration_s": duration, "turns": report["turns"]["count"]})
            tried.append(report)
        done = missing is None or len(runs) > MAX_STEP_EXTENSIONS or steps_rules.refused(report)
        if stopped or done:
            tried_so_far.extend(tried)
            if on_step is not None:
                on_step(level, started, time.monotonic())
            return JudgedStep(report, results, missing, runs, duration, started, tried)
        say(f"{what}: {missing} in {duration:g} s; running it again for {2 * duration:g} s")
        duration *= 2


async def run_sweep(
    config: LoadConfig,
    url: str,
    embedded: dict[str, Any] | None,
    irq: Interrupts,
    on_step: Callable[[int, float, float], None] | None = None,
    out: Path | None = None,
) -> dict[str, Any]:
    """``--sweep``: every level once, in order, no bisection (docs/metrics.md "Level
    sweep"). Each level is a :func:`judged_step` of N closed-loop sessions with the joining
    sessions; the report is the last level's, with ``sweep`` first: the per-level table
    (:mod:`duplexctl.report.sweep`) and every level's tally, so ``duplexctl report``
    rebuilds the table exactly."""
    from duplexctl.report import sweep as sweep_report

    judged = config.capacity
    assert judged.sweep is not None
    slos = parse_slos(list(judged.slos))
    rows: list[dict[str, Any]] = []
    data: list[dict[str, Any]] = []
    tried: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    began = time.monotonic()
    for level in judged.sweep:
        if irq.stop.is_set():
            break
        step = await judged_step(
            config, level, url, embedded, irq, slos, "sweep level", "sessions", tried, on_step,
            out=out, join_samples=judged.joins,
        )  # fmt: skip
        report = step.report  # interrupted: the partial level's figures, but no row
        if irq.stop.is_set():
            break
        rows.append(sweep_report.level_row(level, report, list(judged.slos), step.runs))
        data.append(
            {
                "level": level,
                "recorder": report["recorder"],
                "wall_s": report["wall_s"],
                "duration_s": step.duration_s,
                "workers": report["workers"],
                "runs": step.runs,
            }
        )
        await asyncio.sleep(STEP_PAUSE_S)
    section = {
        "unit": "sessions",
        "levels": rows,
        "baseline": sweep_report.baseline(rows),
        "step_duration_s": judged.step_duration_s,
        "join_samples": judged.joins,
        "stagger": config.shape.stagger,
        "thresholds_ms": list(judged.continuity_thresholds_ms),
        "criteria": steps_rules.criteria(list(judged.slos)),
        # the level whose figures the report's own sections hold (the last one run)
        "figures_from": rows[-1]["level"] if rows else None,
        "totals": search_totals(tried, time.monotonic() - began),
        "data": data,
    }
    return sweep_report.lead(report, section)


def search_totals(runs: Sequence[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """What the whole search did (every run of every step, extended tries included): its
    wall time, attempts by outcome and the causes of those not admitted, turns."""
    by_kind: dict[str, int] = {}
    causes: dict[str, int] = {}
    for report in runs:
        for kind, n in report["admission"]["by_kind"].items():
            by_kind[kind] = by_kind.get(kind, 0) + n
        for cause, n in report["admission"]["causes"].items():
            causes[cause] = causes.get(cause, 0) + n
    return {
        "wall_s": round(wall_s, 3),
        "runs": len(runs),
        "attempts": sum(by_kind.values()),
        "by_kind": by_kind,
        "causes": causes,
        "turns": sum(r["turns"]["count"] for r in runs),
    }


def answer(cap: dict[str, Any], slo: Sequence[SloResult]) -> str:
    """The search's answer in one line: "holds 3 sessions with every SLO met (ttfa_p95<=800ms:
    512 ms); first failure at 4 sessions: 12 capacity rejections (…); the server advertised
    limit 3"."""
    unit = cap["unit"]
    best = cap["largest_pass"]
    if best is None and cap.get("first_fail") is None:
        return "no step was completed: no answer (the search was stopped first)"
    if best is None:
        text = f"holds no level: not even {cap['first_fail']} {unit} met the criteria"
    else:
        met = ", ".join(r.describe().removeprefix("PASS ") for r in slo)
        text = f"holds {best} {unit} " + (
            f"with every SLO met ({met})"
            if met
            else "with no rejection and no failed attempt (no --slo: latency not judged)"
        )
    if cap.get("first_fail") is not None and best is not None:
        text += f"; first failure at {cap['first_fail']} {unit}: {cap['fail_reason'] or 'see the steps'}"
    elif cap.get("first_fail") is None:
        text += f"; no failure up to {best} {unit} (the highest level tried: --max-level)"
    else:
        text += f": {cap['fail_reason'] or 'see the steps'}"
    limit = cap.get("advertised_limit")
    text += (
        f"; the server advertised limit {limit}"
        if limit is not None
        else "; the server advertised no limit"
    )
    return text


def say(line: str) -> None:
    """A progress line on stderr (stdout may be the one JSON document)."""
    print(f"duplexctl: {line}", file=sys.stderr, flush=True)


def sessions_by_node(workers: list[dict[str, Any]]) -> dict[str, int]:
    """Sessions started on each node by a ``--ray`` step's workers ({} for local workers,
    which name no node): a step's load is spread over the cluster like a whole run's."""
    nodes: dict[str, int] = {}
    for w in workers:
        if w.get("node") is not None:
            nodes[w["node"]] = nodes.get(w["node"], 0) + int(w.get("sessions_started", 0))
    return nodes


async def measure_slot_release(config: LoadConfig, url: str, stop: asyncio.Event) -> dict[str, Any]:
    """Time from a session ending (clean close, then abrupt drop) to a new admission."""
    plan = make_plan(config)
    options = ConnectionOptions(
        queue_happenings=False, heartbeat_s=5.0, auto_resume=False, close_timeout_s=5.0
    )
    holders: list[DuplexConnection] = []
    out: dict[str, Any] = {}

    async def try_open() -> DuplexConnection | None:
        try:
            return await DuplexConnection.open(
                url, plan.settings, api_key=config.target.api_key, timeout=10.0, options=options
            )
        except AdmissionRejected:
            return None

    say(
        "slot release: filling the server to its admission limit with idle sessions, then "
        "timing a new admission after a clean close and after a dropped connection (each "
        f"waits at most {SLOT_RELEASE_LIMIT_S:g} s; --no-slot-release skips this)"
    )
    try:
        limit: int | None = None
        for _ in range(MAX_HOLDERS):
            conn = await try_open()
            if conn is None:
                limit = len(holders)
                break
            holders.append(conn)
        if limit is None:
            return {"note": f"no rejection within {MAX_HOLDERS} sessions: not measured"}
        for how in ("clean_close", "abrupt_drop"):
            if stop.is_set() or not holders:
                break
            victim = holders.pop(0)
            if how == "clean_close":
                t_end = time.monotonic_ns()
                await victim.close()
            else:
                t_end = await victim.drop()
                holders.append(victim)  # closed (resumed, then closed) at the end
            waiter, attempts = None, 0
            began = time.monotonic()
            deadline = began + SLOT_RELEASE_LIMIT_S
            told = began
            while waiter is None and time.monotonic() < deadline and not stop.is_set():
                attempts += 1
                waiter = await try_open()
                if waiter is None:
                    await asyncio.sleep(POLL_S)
                    if time.monotonic() - told >= PROGRESS_EVERY_S:
                        told = time.monotonic()
                        say(
                            f"slot release after {how.replace('_', ' ')}: still full after "
                            f"{told - began:.0f} s of at most {SLOT_RELEASE_LIMIT_S:g} s"
                            + (
                                " (a dropped session is held for its disconnect grace)"
                                if how == "abrupt_drop"
                                else ""
                            )
                        )
            if waiter is None:
                out[how] = {
                    "slot_release_ms": None,
                    "attempts": attempts,
                    "note": f"no admission within {SLOT_RELEASE_LIMIT_S:g} s",
                }
                continue
            created = waiter.timings.t_created_ns or time.monotonic_ns()
            out[how] = {
                "slot_release_ms": round((created - t_end) / 1e6, 3),
                "attempts": attempts,
                "resolution_ms": POLL_S * 1000,
                "limit": limit,
                "note": "approaches the server's disconnect grace" if how == "abrupt_drop" else "",
            }
            holders.append(waiter)
    except OpenFailed as exc:
        out["error"] = str(exc)
    finally:
        await asyncio.gather(*(h.close() for h in holders), return_exceptions=True)
    return out
