"""Plain-text rendering of probe verdicts (``--json`` prints ``ProbeReport.to_dict()``).

One line per probe — verdict, name, time, what was found — so a run reads like a checklist;
a failure is followed by its findings and its evidence (the frames around the failure with
their times), because "fail" alone sends the server's owner hunting.
"""

from __future__ import annotations

from duplexctl.probe.model import ProbeReport, ProbeResult, TraceEntry, Verdict

_LABEL = {Verdict.PASS: "PASS", Verdict.FAIL: "FAIL", Verdict.SKIPPED: "SKIP"}
_ARROW = {"in": "<", "out": ">", "net": "#", "note": "*"}


def _entry(e: TraceEntry) -> str:
    seq = f" [{e.seq}]" if e.seq is not None else ""
    where = "" if e.dir == "note" else f"{e.conn:<12} "
    what = e.detail if e.dir == "note" else f"{e.type}{seq} {e.detail}".rstrip()
    return f"      {e.t_ms:>9.1f} ms  {where}{_ARROW.get(e.dir, '?')} {what}"


def result_lines(r: ProbeResult, *, name_width: int = 20) -> list[str]:
    head = f"{_LABEL[r.verdict]}  {r.name:<{name_width}} {r.duration_ms / 1000:6.2f} s  {r.summary}"
    lines = [head]
    if r.verdict is not Verdict.SKIPPED:
        lines.extend(f"      - {f}" for f in r.findings)
    if r.verdict is Verdict.FAIL:
        if r.catches:
            lines.append(f"      catches: {r.catches}")
        if r.evidence:
            lines.append("      evidence (time since the probe started, connection, frame):")
            lines.extend(_entry(e) for e in r.evidence)
    return lines


def summary_line(report: ProbeReport) -> str:
    c = report.counts()
    n = len(report.results)
    return (
        f"{n} probes: {c['pass']} passed, {c['fail']} failed, {c['skipped']} skipped "
        f"in {report.duration_ms / 1000:.1f} s"
    )


def render(report: ProbeReport) -> str:
    lines: list[str] = []
    for r in report.results:
        lines.extend(result_lines(r))
    lines.append(summary_line(report))
    return "\n".join(lines)
