"""``--find-capacity`` and ``--measure-slot-release``: where a server stops keeping up.

Capacity search. Each step is a complete, timed load run (``--step-duration``) at one
offered level — concurrent sessions (closed loop) or sessions/s (``--rate`` given: open
loop) — judged by the run's own criteria: no capacity rejections, no failed attempts
(refused, timed out …), every ``--slo`` held, and the client's own pacing valid (a step the
client could not pace says nothing about the server, so it fails as ``invalid_pacing``). :class:`~duplexctl.load.capacity.CapacitySearch`
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
import time
from collections.abc import Callable
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
from duplexctl.report.load_report import tally_of
from duplexctl.report.slo import evaluate, parse_slos

POLL_S: Final = 0.025
SLOT_RELEASE_LIMIT_S: Final = 45.0
STEP_PAUSE_S: Final = 1.0
#: Most idle sessions opened to find a full server (bounds the slot-release measurement).
MAX_HOLDERS: Final = 1024


async def find_capacity(
    config: LoadConfig,
    url: str,
    embedded: dict[str, Any] | None,
    irq: Interrupts,
    on_step: Callable[[int, float, float], None] | None = None,
) -> dict[str, Any]:
    """The search; ``on_step(level, start, end)`` (monotonic seconds) after each step (the
    server metrics scraped during it are summarised per step)."""
    open_loop = config.rate is not None
    unit = "sessions/s" if open_loop else "sessions"
    search = CapacitySearch(start=config.capacity_start, max_level=config.max_level)
    slos = parse_slos(config.slos)
    steps: list[dict[str, Any]] = []
    reports: dict[int, dict[str, Any]] = {}
    rejections_began: int | None = None
    while (level := search.next_level()) is not None and not irq.stop.is_set():
        step_cfg = dataclasses.replace(
            config,
            find_capacity=False,
            sessions=None if open_loop else level,
            rate=float(level) if open_loop else None,
            duration_s=config.step_duration_s,
            count=None,
            slos=list(config.slos),
        )
        started = time.monotonic()
        live_export.step(level)  # --prometheus-rw: this step's series carry level=...
        report = await run_step(
            step_cfg, url, embedded, irq, out=None, title=f"capacity step: {level} {unit}"
        )
        if on_step is not None:
            on_step(level, started, time.monotonic())
        if irq.interrupted:
            break
        headline = tally_of(report).headline()
        results = evaluate(slos, headline, report["scalars"])
        rejected = report["admission"]["by_kind"].get("rejected_capacity", 0)
        reasons = []
        if rejected:
            codes = ", ".join(
                f"{k.split(':', 1)[1]} {n}"
                for k, n in report["admission"]["by_code"].items()
                if k.startswith("rejected_capacity")
            )
            reasons.append(f"{rejected} capacity rejections ({codes})")
            if rejections_began is None or level < rejections_began:
                rejections_began = level
        failed = report["admission"]["failed"]
        if failed:
            causes = ", ".join(
                f"{c} {n}"
                for c, n in report["admission"]["causes"].items()
                if c != "rejected_capacity"
            )
            reasons.append(f"{failed} failed attempts ({causes})")
        reasons.extend(f"SLO failed: {r.describe()}" for r in results if not r.passed)
        if report["validity"]["invalid_pacing"]:
            reasons.append("invalid_pacing (client could not keep real time)")
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
                "slo": [r.to_dict() for r in results],
                # --ray: where the step ran (node id → sessions started there)
                "nodes": sessions_by_node(report["workers"]),
            }
        )
        reports[level] = report
        await asyncio.sleep(STEP_PAUSE_S)
    result = search.result()
    best = result.largest_pass
    base = reports.get(best) if best is not None else None
    if base is None:
        base = reports[max(reports)] if reports else {}
    report = dict(base)
    if best is not None:
        report["slo"] = [
            r.to_dict() for r in evaluate(slos, tally_of(base).headline(), base["scalars"])
        ]
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
        "step_duration_s": config.step_duration_s,
        "criteria": [
            *list(config.slos),
            "no capacity rejections",
            "no failed attempts",
            "valid pacing",
        ],
    }
    return report


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
                url, plan.settings, api_key=config.api_key, timeout=10.0, options=options
            )
        except AdmissionRejected:
            return None

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
            deadline = time.monotonic() + SLOT_RELEASE_LIMIT_S
            while waiter is None and time.monotonic() < deadline and not stop.is_set():
                attempts += 1
                waiter = await try_open()
                if waiter is None:
                    await asyncio.sleep(POLL_S)
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
