"""Each command's verdicts as JUnit suites (``--junit FILE``; the model is :mod:`~.junit`).

Every case says what the command's own verdict says, so a CI job reading the file and one
reading the exit code agree (docs/metrics.md "JUnit"):

* **probe**: a case per probe run — passed, a failure whose text is the evidence (every
  frame and note of its trace with its time), or skipped with the reason.
* **load**: a case per ``--slo`` (failure: the figure, its ``n``, "no samples"); with
  ``--find-capacity`` a case per level tried (failure: why the level did not meet the
  criteria — a search's top level fails by design) and one that fails when no level met
  them (exit 1); an ``admission`` case that is an error when no session was ever admitted
  (exit 3); a failure per lost ``--ray`` worker; an error when the run was interrupted.
* **replay**: a suite per scenario, a case per expectation (a step's, the scenario's
  ``[expect]``; one the run never reached is skipped), and the run's own checks: protocol
  invariants, unanswered turns, problems, interruption.

Figures the verdict leaves open (``invalid_pacing``: latencies not to be trusted) are the
suite's properties, beside the run id of its pushed series.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from duplexctl.export.junit import ERROR, FAILURE, SKIPPED, Case, Suite, properties


def error_suite(command: str, name: str, message: str) -> Suite:
    """A command that could not judge anything (server unreachable, bad input mid-run)."""
    return Suite(name, [Case(command, f"duplexctl.{command}", ERROR, message)])


# -- probe ----------------------------------------------------------------------------------


def _trace(evidence: Iterable[Mapping[str, Any]]) -> str:
    lines = []
    for e in evidence:
        seq = f" seq={e['seq']}" if e.get("seq") is not None else ""
        detail = f" {e['detail']}" if e.get("detail") else ""
        lines.append(f"{e['t_ms']:10.1f} ms  {e['conn']:<6} {e['dir']:<4} {e['type']}{seq}{detail}")
    return "\n".join(lines)


def probe_suite(report: Mapping[str, Any]) -> Suite:
    """``probe``'s suite from its report (``ProbeReport.to_dict``, or the partial one)."""
    suite = Suite(
        f"duplexctl probe {report.get('url', '')}".strip(),
        properties=properties({"url": report.get("url"), "budget_s": report.get("budget_s")}),
        time_s=float(report.get("duration_ms", 0.0)) / 1000,
    )
    for r in report.get("results", []):
        verdict = r.get("verdict")
        outcome = {"fail": FAILURE, "skipped": SKIPPED}.get(verdict, "passed")
        findings = "\n".join(r.get("findings", []))
        suite.cases.append(
            Case(
                name=r["name"],
                classname="duplexctl.probe",
                outcome=outcome,
                message=r.get("summary", ""),
                text=_trace(r.get("evidence", [])) if outcome == FAILURE else "",
                time_s=float(r.get("duration_ms", 0.0)) / 1000,
                output="\n".join(x for x in (r.get("summary", ""), findings) if x),
            )
        )
    return suite


# -- load -------------------------------------------------------------------------------------


def _slo_case(slo: Mapping[str, Any]) -> Case:
    actual = slo.get("actual")
    n = slo.get("n")
    said = "no samples" if actual is None else f"actual {actual:g}"
    if actual is not None and n is not None:
        said += f" (n={n})"
    if slo.get("low_n"):
        said += ", p99 from fewer than 100 samples"
    if slo.get("reason") and actual is not None:
        said += f"; {slo['reason']}"
    return Case(
        name=str(slo["expr"]),
        classname="duplexctl.load.slo",
        outcome="passed" if slo.get("passed") else FAILURE,
        message=f"{slo['expr']}: {said}",
        output=f"{slo['expr']}: {said}",
    )


def load_suite(report: Mapping[str, Any], *, unreached: str | None = None) -> Suite:
    """``load``'s suite from its report; ``unreached`` is the exit-3 line (no session was
    ever admitted), if any."""
    validity = report.get("validity", {})
    suite = Suite(
        "duplexctl load",
        time_s=float(report.get("wall_s", 0.0)),
        properties=properties(
            {
                "url": report.get("url") or (report.get("embedded_server") or {}).get("url"),
                "run_id": (report.get("prometheus_remote_write") or {}).get("run_id"),
                "invalid_pacing": validity.get("invalid_pacing"),
                "send_lag_p99_ms": validity.get("send_lag_p99_ms"),
            }
        ),
    )
    admission = report.get("admission", {})
    adm = Case("session admission", "duplexctl.load")
    if unreached is not None:
        adm.outcome, adm.message = ERROR, unreached
    else:
        adm.output = f"{admission.get('attempts', 0)} attempts, admitted {admission.get('by_kind', {}).get('admitted', 0)}"
    suite.cases.append(adm)
    cap = report.get("capacity_search")
    sweep = report.get("sweep")
    if sweep is not None:  # a level sweep: a case per level, its SLOs judged there
        for row in sweep.get("levels", []):
            slos = "; ".join(
                f"{'PASS' if r['passed'] else 'FAIL'} {r['expr']}: {r['actual']}"
                for r in row.get("slo", [])
            )
            suite.cases.append(
                Case(
                    name=f"level {row['level']} {sweep.get('unit', 'sessions')}",
                    classname="duplexctl.load.sweep",
                    outcome="passed" if row.get("passed") else FAILURE,
                    message=row.get("reason", ""),
                    output=slos or "no --slo: judged on admission and pacing",
                )
            )
    elif cap is None:
        suite.cases.extend(_slo_case(slo) for slo in report.get("slo", []))
    else:
        unit = cap.get("unit", "")
        for step in cap.get("steps", []):
            suite.cases.append(
                Case(
                    name=f"level {step['level']} {unit}",
                    classname="duplexctl.load.capacity",
                    outcome="passed" if step.get("passed") else FAILURE,
                    message=step.get("reason", ""),
                    output=f"ttfa p95 {step.get('ttfa_p95')} ms (n={step.get('ttfa_n')}), "
                    f"admitted {step.get('admitted')}",
                )
            )
        found = Case("a level met the capacity criteria", "duplexctl.load.capacity")
        if cap.get("largest_pass") is None and not report.get("interrupted"):
            found.outcome = FAILURE
            found.message = (
                f"no level met the capacity criteria (first failure at {cap.get('first_fail')} "
                f"{unit}: {cap.get('fail_reason') or 'see the levels'})"
            )
        else:
            found.output = f"largest level that met them: {cap.get('largest_pass')} {unit}"
        suite.cases.append(found)
    for worker in report.get("workers", []):
        lost = worker.get("lost")
        if lost:
            suite.cases.append(
                Case(
                    f"worker {worker.get('worker')}",
                    "duplexctl.load.workers",
                    FAILURE,
                    f"lost at {lost.get('at_s')} s on node {str(lost.get('node'))[:12]} with "
                    f"{lost.get('sessions_lost')} sessions ({lost.get('reason')})",
                )
            )
    if report.get("interrupted"):
        suite.cases.append(
            Case("run", "duplexctl.load", ERROR, "interrupted: partial results (exit 130)")
        )
    return suite


# -- replay -----------------------------------------------------------------------------------


def _expectation_case(entry: Mapping[str, Any], classname: str) -> Case:
    where = "run" if entry.get("step") is None else f"step {entry['step']}"
    name = f"{where}: {entry['name']} {entry.get('expected', '')}".strip()
    actual = entry.get("actual")
    said = f"{entry['name']} = {actual!r}, expected {entry.get('expected', '')}"
    return Case(
        name=name,
        classname=classname,
        outcome="passed" if entry.get("ok") else FAILURE,
        message=said,
        output=said,
    )


def replay_suite(report: Mapping[str, Any]) -> Suite:
    """One scenario's suite from its replay report (``report.json``)."""
    scenario = report.get("scenario") or {}
    name = str(scenario.get("name") or scenario.get("source") or "replay")
    classname = f"duplexctl.replay.{name}"
    pacing = report.get("pacing", {})
    suite = Suite(
        f"duplexctl replay {name}",
        properties=properties(
            {
                "url": report.get("url"),
                "scenario": scenario.get("source"),
                "session_id": (report.get("session") or {}).get("id"),
                "run_id": (report.get("prometheus_remote_write") or {}).get("run_id"),
                "invalid_pacing": pacing.get("invalid_pacing"),
            }
        ),
    )
    expectations = report.get("expectations", {})
    judged = [e for turn in report.get("turns", []) for e in turn.get("expectations", [])]
    judged += [
        e
        for e in expectations.get("failed", [])
        if e.get("turn") is None and e.get("step") is not None
    ]
    judged += expectations.get("run", [])
    suite.cases.extend(_expectation_case(e, classname) for e in judged)
    for e in expectations.get("not_reached", []):
        where = "run" if e.get("step") is None else f"step {e['step']}"
        suite.cases.append(
            Case(
                f"{where}: {e['name']} {e.get('expected', '')}".strip(),
                classname,
                SKIPPED,
                "not reached: the run stopped before this step",
            )
        )
    violations = report.get("violation_counts") or {}
    inv = Case("protocol invariants", classname)
    if violations:
        inv.outcome = FAILURE
        inv.message = ", ".join(f"{k} {v}" for k, v in sorted(violations.items()))
        inv.text = "\n".join(str(v) for v in report.get("violations", [])[:50])
    suite.cases.append(inv)
    unanswered = int(report.get("unanswered_turns", 0) or 0)
    answered = Case("every turn answered", classname)
    if unanswered:
        answered.outcome = FAILURE
        answered.message = f"{unanswered} turn(s) without an answer"
    suite.cases.append(answered)
    problems = report.get("problems") or []
    if problems:
        suite.cases.append(Case("run problems", classname, FAILURE, "; ".join(problems[:3])))
    if report.get("status") == "interrupted":
        suite.cases.append(Case("run", classname, ERROR, "interrupted: partial results (exit 130)"))
    return suite
