"""``duplexctl report RESULT...``: re-render saved load runs and merge them exactly.

A load run's report.json carries the tally it was built from (HDR histograms per time
slice and phase window, counts, admission intervals). Merging several runs adds those
tallies bucket for bucket and rebuilds the report with the very function the load command
used (:func:`duplexctl.report.load_report.build_report`), so the merged p99 is the p99 of all
the samples, not an average of p99s. Slices are aligned by time since each run's start.

What does not add across separate runs is not added: a run's observed capacity is a peak of
its own sessions and its client CPU is its own machine's, so the merged report states the
largest of any one run and lists each run's own values under ``runs`` (``MERGE_RULES``).
Runs on several hosts against one server at the same time would need one clock to pool
their session intervals; each host's monotonic clock has its own zero, so no merged peak is
claimed for them either.

Runs with different warm-up, or slice lengths not a power of two apart, cannot be merged
(their windows would not line up); that is one line and exit code 2. Slice lengths a power
of two apart merge at the longer one (docs/metrics.md "Statistics").
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from duplexctl.errors import BadInput, CheckFailed
from duplexctl.report.load_report import (
    build_report,
    render_final,
    run_summary,
    tally_of,
    write_outputs,
)
from duplexctl.rundir import JsonLines, announce, prepare_run_dir
from duplexctl.terminal import json_text


def load_result(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """A saved load report (a report.json, or an --out directory holding one)."""
    p = Path(path)
    file = p / "report.json" if p.is_dir() else p
    try:
        doc = json.loads(file.read_text())
    except FileNotFoundError:
        raise BadInput(f"{file}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{file}: not a readable JSON report ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != "duplexctl.load" or "recorder" not in doc:
        raise BadInput(f"{file}: not a duplexctl load report (no recorder to merge)")
    return file, doc


def merge_reports(docs: Sequence[dict[str, Any]], *, sources: Sequence[str] = ()) -> dict[str, Any]:
    """One report from several, exactly (see the module docstring)."""
    if not docs:
        raise BadInput("nothing to merge")
    first = docs[0]
    if any(doc.get("sweep") for doc in docs):  # a level sweep: its table, level by level
        from duplexctl.report import sweep

        try:
            levels = sweep.merge(docs, sources or [f"run {i + 1}" for i in range(len(docs))])
        except ValueError as exc:
            raise BadInput(f"cannot merge: {exc}") from None
        base = dict(first) if len(docs) == 1 else _merged(docs, sources)
        base["sweep"] = levels if len(docs) > 1 else dict(first["sweep"])
        return sweep.rebuild(base)
    if len(docs) == 1:
        return dict(first)
    return _merged(docs, sources)


def _merged(docs: Sequence[dict[str, Any]], sources: Sequence[str]) -> dict[str, Any]:
    """Several runs' tallies added into one report (the module docstring's rules)."""
    first = docs[0]
    merged = tally_of(first)
    for src, doc in zip(sources or [""] * len(docs), docs, strict=False):
        if doc is first:
            continue
        try:
            merged.merge_encoded(doc["recorder"])
        except ValueError as exc:
            raise BadInput(f"{src or 'report'}: cannot merge: {exc}") from None
    workers = [dict(w, run=i) for i, doc in enumerate(docs) for w in doc.get("workers", [])]
    runs = [
        run
        for src, doc in zip(sources or [""] * len(docs), docs, strict=False)
        for run in run_summary(src, doc)
    ]
    chunk_ms = int(first.get("validity", {}).get("chunk_ms", 100))
    report = build_report(
        merged,
        config=first.get("config", {}),
        workers=workers,
        wall_s=sum(run["wall_s"] for run in runs),
        chunk_ms=chunk_ms,
        url=first.get("url"),
        embedded=first.get("embedded_server"),
        capabilities=first.get("server", {}).get("capabilities"),
        interrupted=any(d.get("interrupted") for d in docs),
        end_reason=",".join(sorted({str(d.get("end_reason", "")) for d in docs})),
        extra={"merged_from": list(sources)},
        runs=runs,
    )
    return report


def rerender(
    results: Sequence[str],
    *,
    out: str | None = None,
    plot: str | None = None,
    overwrite: bool = False,
    json_output: bool = False,
    slos: Sequence[str] = (),
    html: str | None = None,
    compare: bool = False,
    fail_on_regression: float | None = None,
) -> int:
    """The ``report`` command: load, merge, judge, write, plot, print; returns the exit code.

    ``--compare`` does not merge: it compares the second run with the first
    (:mod:`duplexctl.report.compare`)."""
    from duplexctl.report.slo import all_passed, evaluate, parse_slos

    html_path = _html_target(html, results)
    if fail_on_regression is not None and not compare:
        raise BadInput("--fail-on-regression needs --compare")
    if compare:
        unused = [flag for flag, v in (("--out", out), ("--plot", plot), ("--slo", slos)) if v]
        if unused:
            raise BadInput(f"{', '.join(unused)}: not used with --compare (it merges nothing)")
        return compare_runs(
            results, html=html_path, json_output=json_output, fail_on_regression=fail_on_regression
        )
    if html_path is not None and len(results) == 1 and (page_of := _replay_or_probe(results[0])):
        from duplexctl.report.html import page

        page.write_atomic(html_path, page_of())
        print(f"duplexctl: page written to {html_path}", file=sys.stderr)
        return 0

    loaded = [load_result(r) for r in results]
    docs = [doc for _p, doc in loaded]
    report = merge_reports(docs, sources=[str(p) for p, _d in loaded])
    _server_metrics(report, loaded)
    exprs = list(slos) or list(report.get("config", {}).get("slos") or [])
    try:
        parsed = parse_slos(exprs)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    targets = _output_dirs(out, plot, [p.parent for p, _d in loaded], overwrite)
    code = 0
    if parsed:
        verdicts = evaluate(parsed, tally_of(report).headline(), report["scalars"])
        report["slo"] = [v.to_dict() for v in verdicts]
        code = 0 if all_passed(verdicts) else CheckFailed.exit_code
    if out is not None:
        target = Path(out)
        write_outputs(target, report)
        for name in ("turns.jsonl", "sessions.jsonl", "behaviour.jsonl"):
            parts = [p.parent / name for p, _d in loaded if (p.parent / name).exists()]
            if parts:
                _concat(parts, target / name)
        scraped = loaded[0][0].parent / "server_metrics.jsonl"
        if len(loaded) == 1 and scraped.exists():  # several runs' samples are not pooled
            _concat([scraped], target / scraped.name)
    if plot is not None:
        from duplexctl.report.plots import draw

        for path in draw(report, Path(plot), runs=docs):
            if not json_output:
                print(f"plot: {path}")
    if json_output:
        print(json_text(report))
    else:
        render_final(report, rich_table=False)
    if html_path is not None:
        from duplexctl.report.html import load_page, page

        page.write_atomic(html_path, load_page.build(report))
    if out is not None:
        from duplexctl.report.html import load_page

        load_page.write(report, Path(out))
    for target in targets:
        announce(target)
    if html_path is not None:
        print(f"duplexctl: page written to {html_path}", file=sys.stderr)
    return code


def compare_runs(
    results: Sequence[str],
    *,
    html: Path | None,
    json_output: bool,
    fail_on_regression: float | None,
) -> int:
    """``report A B --compare``: printed, ``--json``, ``--html``; exit 1 on a regression
    beyond ``--fail-on-regression PCT``."""
    from duplexctl.report.compare import compare, describe, lines, regressions

    if len(results) != 2:
        raise BadInput(f"--compare takes two runs, A (the baseline) and B; got {len(results)}")
    if fail_on_regression is not None and not fail_on_regression >= 0:
        raise BadInput("--fail-on-regression must be a percentage >= 0")
    doc = compare(results[0], results[1])
    failing = [] if fail_on_regression is None else regressions(doc, fail_on_regression)
    doc["fail_on_regression_pct"] = fail_on_regression
    doc["regressions"] = [f"{r['figure']} {r['stat']}" for r in failing]
    if json_output:
        print(json_text(doc))
    else:
        print("\n".join(lines(doc)))
    if html is not None:
        from duplexctl.report.html import compare_page, page

        page.write_atomic(html, compare_page.build(doc, threshold_pct=fail_on_regression))
        print(f"duplexctl: page written to {html}", file=sys.stderr)
    if failing:
        print(
            f"duplexctl: check failed: regression beyond {fail_on_regression:g} %: "
            + "; ".join(describe(r) for r in failing),
            file=sys.stderr,
        )
        return CheckFailed.exit_code
    return 0


def _replay_or_probe(result: str) -> Callable[[], str] | None:
    """A saved replay or probe run renders its own page (nothing to merge); None for the
    rest, which must then be load reports (:func:`load_result` says so if not)."""
    p = Path(result)
    file = p / "report.json" if p.is_dir() else p
    try:
        doc = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # load_result gives the one-line error
    if not isinstance(doc, dict):
        return None
    if doc.get("command") == "replay":
        from duplexctl.report.html import replay_page

        return lambda: replay_page.build(file.parent)
    if doc.get("kind") == "duplexctl.probe":
        from duplexctl.report.html import probe_page

        return lambda: probe_page.build(doc)
    return None


def _html_target(html: str | None, inputs: Sequence[str]) -> Path | None:
    """``--html FILE``: a file path (never a directory, never one of the inputs)."""
    if html is None:
        return None
    path = Path(html)
    if path.is_dir():
        raise BadInput(f"--html {html}: is a directory (give a file name, e.g. report.html)")
    if any(path.resolve() == Path(i).resolve() for i in inputs):
        raise BadInput(f"--html {html}: is one of the inputs")
    if not path.parent.is_dir():
        raise BadInput(f"--html {html}: no such directory {path.parent}")
    return path


def _server_metrics(report: dict[str, Any], loaded: Sequence[tuple[Path, dict[str, Any]]]) -> None:
    """The server's metrics of the runs, summarised again from their files (docs/metrics.md
    "Server metrics"). One run: its ``server_metrics``. Several: each run's own, under
    ``server_metrics_by_run`` — their clocks have separate zeros, and runs of several hosts
    scraped the same server, so samples are not pooled."""
    from duplexctl.prometheus.summary import saved_section

    sections = [(str(p), saved_section(p.parent, doc)) for p, doc in loaded]
    report.pop("server_metrics", None)
    if len(sections) == 1:
        if sections[0][1] is not None:
            report["server_metrics"] = sections[0][1]
        return
    by_run = [{"source": src, **sec} for src, sec in sections if sec is not None]
    if by_run:
        report["server_metrics_by_run"] = by_run


def _output_dirs(
    out: str | None, plot: str | None, inputs: Sequence[Path], overwrite: bool
) -> list[Path]:
    """``--out`` and ``--plot`` made ready by the run-directory rule (one directory when
    both name the same); never one the inputs are read from."""
    targets: list[Path] = []
    for flag, path in (("--out", out), ("--plot", plot)):
        if path is None:
            continue
        if any(Path(path).resolve() == t.resolve() for t in targets):
            continue
        if any(Path(path).resolve() == i.resolve() for i in inputs):
            raise BadInput(f"{flag} {path}: is one of the inputs (choose another directory)")
        targets.append(prepare_run_dir(path, flag=flag, overwrite=overwrite, command="report"))
    return targets


def _concat(parts: Sequence[Path], target: Path) -> None:
    """``parts`` one after another in ``target``, whole lines only; a write that fails raises
    WriteFailed (one line naming the path and the cause, exit 4: rundir.py)."""
    out = JsonLines(target)
    try:
        for part in parts:
            data = part.read_bytes()
            if data and not data.endswith(b"\n"):
                data += b"\n"  # a part cut at its end (a killed run) does not glue two lines
            out.write(data)
    finally:
        out.close()
