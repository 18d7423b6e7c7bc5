"""``replay a.toml b.toml …`` or ``replay DIR``: a suite of scenarios, one after another.

Each scenario runs as a replay of its own (its own session and, without ``--url``, its own
embedded server, so one scenario's state cannot leak into the next), with the same command
line options, and ``--out DIR`` gives each its directory ``DIR/<name>/`` (its report.json
and report.html, as ``replay --out``) and writes ``DIR/index.html``, the suite's page that
links each scenario's, and ``DIR/suite.json``. The suite prints one table — scenario,
verdict, turns, ttfa p50, expectations, and why it failed — and exits 1 when any scenario
failed (130 when interrupted: the scenarios not run are listed as such).

The verdict of each scenario is the replay page's (:func:`duplexctl.report.html.replay_page.
verdict_of`), so the table, the index and each scenario's page say the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from duplexctl.errors import BadInput, WriteFailed
from duplexctl.export.options import PushOptions
from duplexctl.prometheus.endpoints import ScrapeOptions
from duplexctl.scenario.config import CliOptions, resolve
from duplexctl.scenario.parse import is_scenario_path, load_scenario

KIND: Final = "duplexctl.replay_suite"
INDEX: Final = "index.html"


def suite_inputs(paths: Sequence[Path]) -> list[Path] | None:
    """The scenario files of a suite — several ``.toml`` files, or a directory's — or None
    when the inputs are one replay (audio files, or one scenario). Mixed inputs and an
    empty directory are BadInput."""
    if len(paths) == 1 and paths[0].is_dir():
        found = sorted(p for p in paths[0].iterdir() if p.is_file() and is_scenario_path(p))
        if not found:
            raise BadInput(f"{paths[0]}: a directory of scenarios, but no .toml file in it")
        return found
    if any(p.is_dir() for p in paths):
        raise BadInput("give one directory of scenarios, or files (scenarios or audio), not both")
    scenarios = [p for p in paths if is_scenario_path(p)]
    if len(scenarios) < 2:
        return None  # one replay: parse.load_inputs says what is wrong with the mix, if anything
    if len(scenarios) != len(paths):
        audio = next(p for p in paths if not is_scenario_path(p))
        raise BadInput(f"{audio}: a suite takes scenario files only (audio files are one replay)")
    return list(scenarios)


@dataclass
class SuiteResult:
    """Each scenario's outcome, in order; ``skipped`` the scenarios a Ctrl-C left unrun."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    interrupted: bool = False
    reports: list[dict[str, Any]] = field(default_factory=list)  # each scenario's report.json
    remote_write: dict[str, Any] | None = None  # --prometheus-rw: what the suite's pushes did
    write_failure: WriteFailed | None = None  # a scenario's --out could not be written

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["verdict"] == "FAIL"]

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.failed else 0

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "kind": KIND,
            "verdict": "INTERRUPTED" if self.interrupted else ("FAIL" if self.failed else "PASS"),
            "scenarios": self.rows,
            "skipped": self.skipped,
        }
        if self.remote_write is not None:
            doc["prometheus_remote_write"] = self.remote_write
        return doc


def row_of(name: str, path: Path, report: Mapping[str, Any], page: str | None) -> dict[str, Any]:
    """One line of the suite's table from a scenario's report."""
    from duplexctl.report.html.replay_page import expectation_text, verdict_of

    (word, _css), _flags = verdict_of(report)
    turns = report.get("turns") or []
    ttfa = sorted(
        t["figures"]["ttfa_ms"]["value"]
        for t in turns
        if isinstance((t.get("figures") or {}).get("ttfa_ms"), Mapping)
        and t["figures"]["ttfa_ms"].get("value") is not None
    )
    exp = report.get("expectations") or {}
    failed = exp.get("failed") or []
    why = [expectation_text(e) for e in failed]
    why += [f"{len(report[k])} {k}" for k in ("errors", "violations", "problems") if report.get(k)]
    if report.get("error"):
        why.append(str(report["error"]))
    return {
        "scenario": name,
        "file": str(path),
        "verdict": word,
        "turns": len(turns),
        "ttfa_p50_ms": ttfa[(len(ttfa) - 1) // 2] if ttfa else None,  # nearest rank
        "expectations_checked": exp.get("checked", 0),
        "expectations_failed": len(failed),
        "why": why,
        "needs_behaviour": (report.get("needs_behaviour") or {}).get("missing"),
        "page": page,
    }


async def run_suite(
    paths: Sequence[Path],
    options: CliOptions,
    url: str | None,
    *,
    api_key: str | None,
    out_dir: Path | None,
    scrape: ScrapeOptions | None,
    server_settings: Mapping[str, Any] | None,
    progress: Callable[[str], None],
    push: PushOptions | None = None,
) -> SuiteResult:
    """Every scenario in turn (each parsed and resolved first: a bad one is exit 2 before
    any runs), then the index page. With ``--prometheus-rw`` the suite is one pushed run
    (one run id), each scenario a source of its own whose last figures stay in the totals."""
    from duplexctl.export.live import pushing

    planned = []
    names: set[str] = set()
    for path in paths:
        scenario = load_scenario(path)
        config = resolve(options, scenario.settings)
        name = scenario.name
        k = 2
        while name in names:  # two files of one name: both kept, apart
            name, k = f"{scenario.name}-{k}", k + 1
        names.add(name)
        planned.append((name, path, scenario, config))
    result = SuiteResult()
    async with pushing(push, command="replay", target=url or "embedded") as feed:
        await _run_planned(
            planned, result, url, api_key, out_dir, scrape, server_settings, progress, feed
        )
        if feed is not None:
            result.remote_write = feed.summary()
    if out_dir is not None and result.write_failure is None:
        write_index(result, out_dir)
    return result


async def _run_planned(
    planned: list[tuple[str, Path, Any, Any]],
    result: SuiteResult,
    url: str | None,
    api_key: str | None,
    out_dir: Path | None,
    scrape: ScrapeOptions | None,
    server_settings: Mapping[str, Any] | None,
    progress: Callable[[str], None],
    feed: Any,
) -> None:
    from duplexctl.rundir import prepare_run_dir
    from duplexctl.scenario.runner import run_replay

    for i, (name, path, scenario, config) in enumerate(planned):
        progress(f"scenario {i + 1} of {len(planned)}: {name} ({path})")
        own = None if out_dir is None else out_dir / name
        if own is not None:
            prepare_run_dir(own, flag="--out", overwrite=False, command="replay")
        run = await run_replay(
            scenario,
            config,
            url,
            api_key=api_key,
            out_dir=own,
            progress=progress,
            handle_sigint=True,
            scrape=scrape,
            server_settings=server_settings,
            suite_feed=None if feed is None else (feed, i),
        )
        result.reports.append(run.report)
        row = row_of(name, path, run.report, None if own is None else f"{name}/report.html")
        result.rows.append(row)
        progress(
            f"scenario {name}: {row['verdict']}" + (f" ({row['why'][0]})" if row["why"] else "")
        )
        if run.interrupted or run.write_failure is not None:
            result.interrupted = run.interrupted
            result.write_failure = run.write_failure
            result.skipped = [n for n, *_ in planned[i + 1 :]]
            break


def write_index(result: SuiteResult, out_dir: Path) -> None:
    """DIR/suite.json and DIR/index.html (the page never costs the suite its exit code)."""
    from duplexctl.report.html import suite_page
    from duplexctl.report.load_report import write_json_atomic

    write_json_atomic(out_dir / "suite.json", result.document())
    suite_page.write(result.document(), out_dir)


def table_lines(result: SuiteResult) -> list[str]:
    """The suite's one table, as aligned plain lines, then the verdict line."""
    head = ("scenario", "verdict", "turns", "ttfa p50", "expectations", "why")
    rows = [
        (
            r["scenario"],
            r["verdict"],
            str(r["turns"]),
            "–" if r["ttfa_p50_ms"] is None else f"{r['ttfa_p50_ms']:.0f} ms",
            f"{r['expectations_checked'] - r['expectations_failed']}/{r['expectations_checked']} held",
            "; ".join(r["why"][:2]) + (f"; {len(r['why']) - 2} more" if len(r["why"]) > 2 else ""),
        )
        for r in result.rows
    ]
    rows += [
        (name, "NOT RUN", "", "", "", "interrupted before it started") for name in result.skipped
    ]
    widths = [max(len(x[i]) for x in (head, *rows)) for i in range(len(head) - 1)]
    lines = []
    for cells in (head, *rows):
        lines.append(
            "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=False)) + "  " + cells[-1]
        )
    doc = result.document()
    failed = len(result.failed)
    lines.append(
        f"suite: {doc['verdict']}: {len(result.rows) - failed} of {len(result.rows)} scenarios passed"
        + (f", {len(result.skipped)} not run" if result.skipped else "")
    )
    return [line.rstrip() for line in lines]
