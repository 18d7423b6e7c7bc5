"""The suite's page, ``replay a.toml b.toml … --out DIR``'s ``DIR/index.html``: the suite's
verdict, then one row per scenario (its verdict, turns, ttfa p50, expectations, why it
failed) linking the scenario's own page, ``DIR/<name>/report.html``. No charts: the
scenarios' pages have them, so this page inlines no runtime."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from duplexctl.report.html import page

INDEX: Final = "index.html"
CLASSES: Final = {"PASS": "pass", "FAIL": "fail", "INTERRUPTED": "warn"}


def build(doc: Mapping[str, Any]) -> str:
    verdict = (doc["verdict"], CLASSES.get(doc["verdict"], "info"))
    rows = doc.get("scenarios") or []
    failed = sum(r["verdict"] == "FAIL" for r in rows)
    return page.render_verdict(
        "suite.html.j2",
        command="replay suite",
        charts={},
        verdict=verdict,
        doc=doc,
        summary=f"{len(rows) - failed} of {len(rows)} scenarios passed"
        + (f", {len(doc.get('skipped') or [])} not run" if doc.get("skipped") else ""),
    )


def write(doc: Mapping[str, Any], out_dir: Path) -> Path | None:
    """DIR/index.html, atomically; a failure is one warning, not the suite's exit code."""
    import sys

    try:
        return page.write_atomic(out_dir / INDEX, build(doc))
    except Exception as exc:  # reported, not raised (page.write_beside's rule)
        print(f"duplexctl: warning: {out_dir / INDEX} not written: {exc!r}", file=sys.stderr)
        return None
