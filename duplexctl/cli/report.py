"""``duplexctl report``: re-render, merge exactly, judge again, plot or compare saved runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from duplexctl.cli import options as o
from duplexctl.cli.app import command
from duplexctl.cli.help import Example

COMPARE = "Comparing runs"

EXAMPLES = (
    Example("report run1", "A saved load run's summary again"),
    Example(
        "report run1 run2 --out merged --plot plots",
        "Two runs merged exactly (from their histograms), with plots",
    ),
    Example("report run1 run2 --html merged.html", "The merge as one self-contained page"),
    Example(
        "report run1 run2 --compare --fail-on-regression 10",
        "run2 against the baseline run1: exit 1 on a regression beyond 10 %",
    ),
    Example('report run1 --slo "ttfa_p95<=800ms"', "A saved run judged by another SLO"),
)


@command(panels=(o.OUTPUT, o.CAPACITY, COMPARE), examples=EXAMPLES)
def report(
    results: Annotated[
        list[Path],
        typer.Argument(
            parser=o.input_path,
            help="report.json files or the --out directories holding them.",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(metavar="DIR", rich_help_panel=o.OUTPUT, help="Write the merged run here."),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            rich_help_panel=o.OUTPUT,
            help="Write one self-contained HTML page here (opens offline).",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(metavar="DIR", rich_help_panel=o.OUTPUT, help="Draw PNG plots here."),
    ] = None,
    json_output: o.JsonOption = False,
    overwrite: o.OverwriteOption = False,
    slo: Annotated[
        list[str] | None,
        typer.Option(
            metavar="EXPR",
            rich_help_panel=o.CAPACITY,
            help='Judge again with this threshold, e.g. "ttfa_p95<=800ms".',
        ),
    ] = None,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            rich_help_panel=COMPARE,
            help="Compare run B with run A (the baseline) instead of merging.",
        ),
    ] = False,
    fail_on_regression: Annotated[
        float | None,
        typer.Option(
            metavar="PCT",
            rich_help_panel=COMPARE,
            help="With --compare: exit 1 when a flagged figure worsens by more than PCT %.",
        ),
    ] = None,
) -> int:
    """Re-render saved load runs; several are merged exactly (from their histograms).

    With --compare: run B against the baseline A, its verdict first (REGRESSION, IMPROVED,
    INCONCLUSIVE, NO SIGNIFICANT CHANGE), every change with its confidence interval."""
    from duplexctl.report.merge import rerender

    def text(path: Path | None) -> str | None:
        return None if path is None else str(path)

    return rerender(
        [str(r) for r in results],
        out=text(out),
        plot=text(plot),
        overwrite=overwrite,
        json_output=json_output,
        slos=list(slo or []),
        html=text(html),
        compare=compare,
        fail_on_regression=fail_on_regression,
    )
