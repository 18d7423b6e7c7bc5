"""``duplexctl load`` end to end: target, workers, live view, capacity search, report, verdict.

* **Target.** ``--url``, or the reference server started in this process on a free loopback
  port (one line on stderr says so).
* **The run.** One timed run (:func:`duplexctl.load.step.run_step`, in this process or in
  ``--workers`` processes: :mod:`duplexctl.load.workers`), or a capacity search of such runs
  (:mod:`duplexctl.load.search`).
* **Ctrl-C.** The first SIGINT stops arrivals and closes every session with
  ``session.close`` (workers receive it too); the partial report is written and the command
  exits 130.
* **Verdict.** A run in which no session was ever admitted exits 3 (the server could not be
  reached or refused every session; one line says why, by cause). Otherwise ``--slo``
  expressions are checked at the end (k6 thresholds): any failure exits 1.
  ``invalid_pacing`` is reported, not fatal: the run says its latencies are not to be
  trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duplexctl.errors import ServerUnreachable
from duplexctl.load import environment
from duplexctl.load.config import LoadConfig
from duplexctl.load.dashboard import Dashboard
from duplexctl.load.engine import make_plan
from duplexctl.load.interrupts import Interrupts
from duplexctl.load.search import find_capacity, measure_slot_release, run_sweep
from duplexctl.load.step import run_step
from duplexctl.report.html.page import command_line
from duplexctl.report.load_report import (
    cause_counts,
    measured_nothing,
    render_final,
    tally_of,
    write_outputs,
)
from duplexctl.rundir import Writes, announce, prepare_run_dir


@dataclass(slots=True)
class RunResult:
    report: dict[str, Any]
    exit_code: int


def run_load(config: LoadConfig) -> RunResult:
    """Validate, run, write and render; the CLI turns ``exit_code`` into the exit status."""
    config.validate()
    plan = make_plan(config)  # bad audio, scenario or session file: exit 2 before any socket
    if config.execution.ray is not None:  # the cluster first: no extra, no cluster → exit 2 / 3
        from duplexctl.load.cluster.connect import resolve_workers

        config = resolve_workers(config)
    output = config.output
    if output.out is not None:
        prepare_run_dir(output.out, flag="--out", overwrite=output.overwrite, command="load")
    first_turn = plan.script.first_turn()
    for line in too_short(config, *first_turn):
        print(f"duplexctl: warning: {line}", file=sys.stderr)
    try:
        if config.execution.uvloop:
            try:
                import uvloop

                return uvloop.run(_main(config, first_turn))
            except ImportError:
                pass
        return asyncio.run(_main(config, first_turn))
    finally:
        if output.out is not None:
            announce(output.out)


@contextlib.asynccontextmanager
async def target(config: LoadConfig) -> AsyncIterator[tuple[str, dict[str, Any] | None]]:
    """The server to load: ``--url``, or the embedded reference server (said in one line)."""
    from duplexctl.client.target import server_target

    url, server = config.target.url, config.server
    overrides = server.settings if url is None else None
    async with server_target(url, overrides, server.spelled) as found:
        if found.embedded is None:
            yield found.url, None
            return
        print(f"duplexctl: {found.line}", file=sys.stderr)
        echo = {
            k: (str(v) if not isinstance(v, int | float | str | bool | type(None)) else v)
            for k, v in dataclasses.asdict(found.embedded).items()
        }
        yield found.url, echo


def too_short(config: LoadConfig, turn_s: float, why: str) -> list[str]:
    """Warnings before the run: a ``--duration`` or ``--step-duration`` shorter than one
    turn of the inputs (:meth:`~duplexctl.load.script.Script.first_turn`) may measure
    nothing."""
    turn = f"one turn of these inputs (about {turn_s:.1f} s: {why})"
    capacity, duration = config.capacity, config.shape.duration_s
    if capacity.find_capacity and capacity.step_duration_s < turn_s:
        return [
            f"--step-duration {capacity.step_duration_s:g}s is shorter than {turn}: a step "
            "that completes no turn runs again for twice as long"
        ]
    if not capacity.find_capacity and duration is not None and duration < turn_s:
        return [f"--duration {duration:g}s is shorter than {turn}: the run may complete no turn"]
    return []


async def _main(config: LoadConfig, first_turn: tuple[float, str]) -> RunResult:
    from duplexctl.client.target import tls_for
    from duplexctl.export.live import pushing
    from duplexctl.prometheus.run import scraping, section, slices_of

    irq = Interrupts()
    irq.install()
    output, capacity = config.output, config.capacity
    out = Path(output.out) if output.out else None
    # --out's writes: the first that fails stops the run as Ctrl-C does (exit 4, rundir.py)
    writes = Writes()
    loop = asyncio.get_running_loop()

    def write_failed() -> None:  # from any thread (the scraper's too)
        loop.call_soon_threadsafe(irq.halt)

    writes.on_failure(write_failed)
    async with target(config) as (url, embedded):
        extra: dict[str, Any] = {}
        # the server's /metrics, scraped by threads beside the run (docs/metrics.md), and
        # with --prometheus-rw the run's own figures pushed by another (export/live.py)
        async with (
            pushing(output.push, command="load", target=url) as feed,
            scraping(
                output.scrape,
                url,
                api_key=config.target.api_key,
                out=out,
                ssl_context=tls_for(url),
                writes=writes,
            ) as scraper,
        ):

            def mark(level: int, start: float, end: float) -> None:
                if scraper is not None:
                    scraper.mark(str(level), start - scraper.origin, end - scraper.origin)

            env = await pinned(config, url, tls_for(url))  # before the first session
            if capacity.find_capacity:
                report = await find_capacity(config, url, embedded, irq, on_step=mark)
            elif capacity.sweep is not None:
                report = await run_sweep(config, url, embedded, irq, on_step=mark, out=out)
            else:
                report = await run_step(config, url, embedded, irq, out=out, writes=writes)
        if feed is not None:
            report["prometheus_remote_write"] = feed.summary()
        if scraper is not None:
            if never_admitted(report) is None:  # else its one line says the server is away
                scraper.release_held()
            cap = report.get("capacity_search")
            stepped = cap or report.get("sweep")  # levels are its windows, not slices
            report["server_metrics"] = section(
                scraper, slices=[] if stepped else slices_of(report), capacity=cap
            )
        env["host_at_end"] = environment.host()
        env["server"]["info_metrics"] = environment.info_metrics(
            scraper.store if scraper is not None else None, scraped=scraper is not None
        )
        report["environment"] = env
        if capacity.no_slot_release and capacity.find_capacity:
            extra["slot_release"] = {"skipped": "--no-slot-release"}
        elif (
            (capacity.measure_slot_release or capacity.find_capacity)
            and not irq.interrupted
            and writes.ok
        ):
            extra["slot_release"] = await measure_slot_release(config, url, irq.stop)
        report.update(extra)
    report["first_turn"] = {"seconds": round(first_turn[0], 3), "estimate": first_turn[1]}
    return finish(config, report, irq.interrupted, out, writes)


async def pinned(config: LoadConfig, url: str, tls: Any) -> dict[str, Any]:
    """The pinned environment as the run begins (``load/environment.py``): the client, the
    host now, the server's ``/v1/models`` answer; the end adds the host then and the
    server's ``*_info`` metrics."""
    models = await asyncio.to_thread(
        environment.models, url, api_key=config.target.api_key, ssl_context=tls
    )
    return {
        "client": environment.client(command_line(sys.argv)),
        "host_at_start": environment.host(),
        "server": {"models": models},
    }


def never_admitted(report: dict[str, Any]) -> str | None:
    """One line saying why no session was ever admitted, or None if one was."""
    cap = report.get("capacity_search") or report.get("sweep")
    steps = (cap.get("steps") or cap.get("levels") or []) if cap else [report["admission"]]
    if cap and not steps and "admission" not in report:
        return "no session was admitted: no level was run"
    if any(step.get("admitted", step.get("by_kind", {}).get("admitted", 0)) for step in steps):
        return None
    a = report["admission"]
    unfinished = a.get("unfinished") or {}
    if a["attempts"]:
        what, causes, examples = f"{a['attempts']} attempts", a["causes"], a["cause_examples"]
    elif unfinished.get("count"):  # every open hung until the run stopped
        what = f"{unfinished['count']} attempts still opening when the run stopped"
        causes, examples = unfinished["causes"], unfinished.get("cause_examples", {})
    else:
        return "no session was admitted: none was attempted"
    first = next(iter(examples.values()), "")
    return f"no session was admitted: {what} ({cause_counts(causes)})" + (
        f"; {first}" if first else ""
    )


def finish(
    config: LoadConfig,
    report: dict[str, Any],
    interrupted: bool,
    out: Path | None,
    writes: Writes | None = None,
) -> RunResult:
    """Judge the SLOs (or, for a capacity search, whether any level met its criteria), write
    the files, print; exit code 4 / 130 / 3 / 1 / 0 (4: a file of ``--out`` could not be
    written, the run stopped there)."""
    writes = writes if writes is not None else Writes()
    from duplexctl.report.slo import all_passed, evaluate, parse_slos

    output = config.output
    slos = parse_slos(list(config.capacity.slos))
    code = 0
    if slos and not config.capacity.stepped:
        results = evaluate(slos, tally_of(report).headline(), report["scalars"])
        report["slo"] = [r.to_dict() for r in results]
        if not all_passed(results):
            code = 1
    report["interrupted"] = interrupted
    if writes.failure is not None:
        report["write_failure"] = str(writes.failure)
    report.setdefault("command", command_line(sys.argv))
    if out is not None:
        write_outputs(out, report, writes)
        from duplexctl.report.html import load_page

        load_page.write(report, out, writes)
    if output.json_output:
        from duplexctl.terminal import json_text

        print(json_text(report))
    else:
        render_final(
            report, rich_table=Dashboard.choose(json_output=False, live=output.live) == "rich"
        )
    cap = report.get("capacity_search")
    if cap is not None and cap["largest_pass"] is None and not interrupted:
        # the search's question has no answer: not even its lowest level met the criteria
        print(
            f"duplexctl: check failed: no level met the capacity criteria (first failure at "
            f"{cap['first_fail']} {cap['unit']}: {cap['fail_reason'] or 'see the steps'})",
            file=sys.stderr,
        )
        code = 1
    sweep = report.get("sweep")
    failed_levels = [r for r in (sweep or {}).get("levels", []) if not r["passed"]]
    if failed_levels and not interrupted:  # a level that failed a criterion is a failed check
        print(
            "duplexctl: check failed: "
            + "; ".join(f"level {r['level']} sessions: {r['reason']}" for r in failed_levels),
            file=sys.stderr,
        )
        code = 1
    for worker in report.get("workers", []):
        lost = worker.get("lost")
        if lost:  # a --ray worker (or its node) died mid-run: partial figures, exit 1
            print(
                f"duplexctl: check failed: worker {worker['worker']} on node "
                f"{str(lost['node'])[:12]} lost at {lost['at_s']} s with "
                f"{lost['sessions_lost']} sessions ({lost['reason']})",
                file=sys.stderr,
            )
            code = max(code, 1)
    stopped = interrupted or writes.failure is not None  # partial: no verdict on the server
    unreached = None if stopped else never_admitted(report)
    empty = None if stopped or unreached is not None else measured_nothing(report)
    if empty is not None:  # a run that completed no turn measured nothing: never a quiet 0
        print(f"duplexctl: check failed: {empty}", file=sys.stderr)
        code = max(code, 1)
    if unreached is not None:
        print(f"duplexctl: error: {unreached}", file=sys.stderr)
        code = ServerUnreachable.exit_code
    if interrupted:
        code = 130
    if writes.failure is not None:
        print(f"duplexctl: error: {writes.failure}", file=sys.stderr)
        code = writes.failure.exit_code
    if output.junit is not None:
        from duplexctl.export import junit
        from duplexctl.export.junit_cases import load_suite

        junit.write(output.junit, [load_suite(report, unreached=unreached)])
    return RunResult(report, code)
