"""The probe page: the verdict table, then for every failure its evidence — each frame sent
and received on each connection, with its time since the probe started — as a timeline and
as the table a server's owner reads line by line.

``probe --out DIR`` saves report.json and this page after every probe, so a Ctrl-C keeps
the verdicts reached so far (the page says the run did not finish).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from duplexctl.report.html import charts, page
from duplexctl.report.load_report import write_json_atomic
from duplexctl.rundir import Writes

KIND: Final = "duplexctl.probe"


def build(doc: Mapping[str, Any]) -> str:
    """The page of one probe report (``ProbeReport.to_dict()``, or the partial one)."""
    results = list(doc.get("results") or [])
    failed = [r for r in results if r.get("verdict") == "fail"]
    specs = {
        f"evidence-{i}": charts.evidence_timeline(r["evidence"], title=r["name"])
        for i, r in enumerate(failed)
        if r.get("evidence")
    }
    if failed:
        verdict = ("FAIL", "fail")
    elif doc.get("partial"):
        verdict = ("INCOMPLETE", "warn")
    else:
        verdict = ("PASS", "pass")
    counts: dict[str, int] = {}
    for r in results:
        counts[r.get("verdict", "?")] = counts.get(r.get("verdict", "?"), 0) + 1
    return page.render_verdict(
        "probe.html.j2",
        command="probe",
        charts=specs,
        d=doc,
        verdict=verdict,
        results=results,
        failed=list(enumerate(failed)),
        counts=counts,
    )


def save(out_dir: Path, doc: Mapping[str, Any], writes: Writes | None = None) -> None:
    """``probe --out DIR``: report.json (atomic) and report.html, as they stand now; a write
    that fails goes to ``writes`` (else it raises WriteFailed)."""
    write_json_atomic(out_dir / "report.json", {"kind": KIND, **doc}, writes)
    page.write_beside(lambda: build(doc), out_dir, writes)
