"""The charts of every page, as Vega-Lite specs built with Altair (docs/report.md).

Each function takes plain rows (what the page module computed from the run's files) and
returns a spec dict; the template renders it with the inlined runtime (``page.py``). Altair
validates every spec against the Vega-Lite schema when it is built, so a wrong field name
fails here, in the tests, not as a blank chart in someone's browser.

Rules every chart keeps, so none can mislead (docs/report.md "Charts that cannot mislead"):

* a panel with no data is not drawn (an empty Vega panel is a blank box, and one with all
  its values missing grew to 33 million pixels); the page says in a sentence what had too
  little data (:func:`too_little`);
* counts and rates start at 0 (``_ZERO``), and an all-zero series still has an axis;
* every point is visible: lines carry filled points large enough to see one alone;
* capacity steps and any series over the offered level are drawn by level, never in the
  order they ran;
* one fixed colour per series, event type and admission outcome on every page
  (:data:`COLOURS`), whatever else a page happens to show.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import altair as alt

from duplexctl.report.histogram import LatencyHistogram

WIDTH: Final = 880
#: HDR percentile axis: x = "nines" = -log10(1 - p), so p90 is 1, p99 2, p99.9 3 …
NINES_LABELS: Final = "['p0','p90','p99','p99.9','p99.99','p99.999','p99.9999'][datum.value]"
#: points per decade of the nines axis (p50 … p99.9… resolved as far as n allows)
_PER_DECADE: Final = 20

Row = dict[str, Any]

#: Fewer points than this is too little to draw a line through: the page says it instead.
MIN_POINTS: Final = 2
#: one colour per name, on every page (series of the time panels, the server's series, the
#: replay timeline's events, the admission outcomes); a name not listed takes the fallback
COLOURS: Final = {
    # the client's time panels
    "sessions_active": "#1a7f37",
    "turns_per_s": "#0969da",
    "attempts": "#57606a",
    "rejections": "#bf8700",
    "errors": "#cf222e",
    "ttfa_p50": "#0969da",
    "ttfa_p95": "#bf8700",
    "ttfa_p99": "#cf222e",
    # the server's series (server_metrics.LABELS)
    "running requests": "#0969da",
    "waiting requests": "#cf222e",
    "KV cache usage": "#8250df",
    "GPU utilisation %": "#bf8700",
    "sessions active (server)": "#1a7f37",
    "sessions in disconnect grace": "#57606a",
    # the replay timeline's events (replay_page.MARKS and the two found by their context)
    "speech started": "#1f77b4",
    "speech stopped": "#6baed6",
    "commit": "#17becf",
    "response.created": "#2ca02c",
    "first audio": "#74c476",
    "barge-in (speech started)": "#d62728",
    "cancel": "#ff7f0e",
    "truncate": "#fdae6b",
    "playback flushed": "#9467bd",
    "response.done": "#8c564b",
    "drop": "#e377c2",
    "resume sent": "#7f7f7f",
    "resumed": "#bcbd22",
    # the level sweep's curves (load_page.SWEEP_PANELS)
    "ttfa p50": "#0969da",
    "ttfa p95": "#bf8700",
    "join ttfa p50": "#8250df",
    "join ttfa p95": "#cf222e",
    "N = 1 ttfa p50": "#57606a",
    "underrun p50": "#0969da",
    "underrun p95": "#bf8700",
    "underrun max": "#cf222e",
    "OK at 50 ms": "#cf222e",
    "OK at 100 ms": "#bf8700",
    "OK at 200 ms": "#1a7f37",
    "RTF < 1 share": "#1a7f37",
    "session RTF p50": "#0969da",
    "session RTF p95": "#bf8700",
    "takeover rate": "#cf222e",
    "stop latency p50": "#0969da",
    "stop latency p95": "#bf8700",
    "response gap p50": "#8250df",
    "response gap p95": "#cf222e",
    "server underrun mean": "#8250df",
    "server OK at 100 ms": "#bf8700",
    # admission outcomes (load_page.admission_rows' kinds)
    "admitted": "#1a7f37",
    "rejected_capacity": "#bf8700",
    "rejected_other": "#cf222e",
    "transport_error": "#8250df",
    "timeout": "#57606a",
}
FALLBACK_COLOUR: Final = "#6e7781"
#: units whose axis starts at 0 (counts and rates); latencies keep Vega-Lite's own choice
_ZERO_UNITS: Final = frozenset(
    {"count", "sessions", "turns/s", "requests", "fraction", "%", "attempts"}
)


def fixed_colours(field: str, names: Sequence[str], *, title: str | None = None) -> alt.Color:
    """A colour encoding whose every name has its one colour (:data:`COLOURS`)."""
    domain = list(dict.fromkeys(names))
    return alt.Color(
        f"{field}:N",
        title=title,
        scale=alt.Scale(domain=domain, range=[COLOURS.get(n, FALLBACK_COLOUR) for n in domain]),
        legend=alt.Legend(orient="right"),
    )


def _y(unit: str, values: Sequence[float]) -> alt.Y:
    """The value axis: from 0 for counts and rates, with a top even when every value is 0."""
    if unit not in _ZERO_UNITS:
        return alt.Y("value:Q", title=unit)
    top = max([0.0, *values])
    scale = alt.Scale(domainMin=0) if top > 0 else alt.Scale(domain=[0, 1])
    return alt.Y("value:Q", title=unit, scale=scale)


def too_little(what: str, n: int, needs: int = MIN_POINTS) -> str:
    """The sentence that stands in for a chart with too little data."""
    return f"{what}: {n} point{'s' if n != 1 else ''}, too few to draw (a chart needs {needs})."


def percentile_points(hist: LatencyHistogram) -> list[Row]:
    """The HDR percentile curve of one histogram: (percentile, nines, value) up to the
    resolution its n allows (1/(1-p) <= n), then the maximum."""
    n = hist.count
    if n == 0:
        return []
    top = math.log10(n) if n > 1 else 0.0
    ks = [k for k in range(int(top * _PER_DECADE) + 1)]
    ps = [100.0 * (1.0 - 10.0 ** (-k / _PER_DECADE)) for k in ks]
    values = hist.percentiles([*ps, 100.0])
    rows = [
        {"nines": k / _PER_DECADE, "percentile": round(p, 5), "value": values[p]}
        for k, p in zip(ks, ps, strict=True)
    ]
    rows.append({"nines": max(top, rows[-1]["nines"]), "percentile": 100.0, "value": hist.max})
    return rows


def percentile_curves(
    curves: Mapping[str, LatencyHistogram], *, unit: str = "ms", title: str = ""
) -> dict[str, Any]:
    """HDR percentile curves, one line per figure, its n in the legend."""
    rows = [
        {"figure": f"{name} (n={hist.count:,})", **point}
        for name, hist in curves.items()
        for point in percentile_points(hist)
    ]
    top = max((r["nines"] for r in rows), default=1.0)
    chart = (
        alt.Chart(alt.Data(values=rows), title=title or alt.Undefined)
        .mark_line(point=alt.OverlayMarkDef(size=30, filled=True), interpolate="step-after")
        .encode(
            x=alt.X(
                "nines:Q",
                title="percentile",
                scale=alt.Scale(domain=[0, max(1.0, math.ceil(top))]),
                axis=alt.Axis(
                    values=list(range(0, max(1, math.ceil(top)) + 1)), labelExpr=NINES_LABELS
                ),
            ),
            y=alt.Y("value:Q", title=unit),
            color=alt.Color("figure:N", title=None, legend=alt.Legend(orient="right")),
            tooltip=[
                alt.Tooltip("figure:N"),
                alt.Tooltip("percentile:Q", format=".4~f"),
                alt.Tooltip("value:Q", format=",.4~g"),
            ],
        )
        .properties(width=WIDTH - 220, height=260)
    )
    return chart.to_dict()


def time_panels(
    rows: Sequence[Row],
    panels: Sequence[tuple[str, Sequence[str], str]],
    *,
    x_max: float,
    drain_from: float | None = None,
) -> dict[str, Any] | None:
    """Stacked panels over one time axis: each panel is (title, fields, unit); each row has
    ``t_s`` (a slice's middle; with ``start_s`` and ``end_s``, counts are bars across it).
    A panel with no value is left out; None when none has one. ``drain_from``: the run's
    planned end, after which its sessions were closing (shaded and labelled "drain")."""
    charts = []
    drain = None
    if drain_from is not None and drain_from < x_max:
        drain = alt.Chart(
            alt.Data(values=[{"from": drain_from, "to": x_max, "label": "drain"}])
        ).encode(x=alt.X("from:Q"), x2="to:Q")
    x = alt.X("t_s:Q", title="seconds since start", scale=alt.Scale(domain=[0, x_max]))
    for title, fields, unit in panels:
        long = [
            {
                "t_s": r["t_s"],
                "start_s": r.get("start_s", r["t_s"]),
                "end_s": r.get("end_s", r["t_s"]),
                "series": f,
                "value": r.get(f),
                "partial": bool(r.get("partial")),
            }
            for r in rows
            for f in fields
            if r.get(f) is not None and not (unit == "count" and r.get(f) == 0)  # no empty bars
        ]
        if not long and unit != "count":
            continue  # nothing to draw: an empty panel is a blank (or a runaway) box
        values = [float(r["value"]) for r in long]
        present = [f for f in fields if any(r["series"] == f for r in long)] or list(fields)
        tooltip = [
            alt.Tooltip("start_s:Q", title="from s"),
            alt.Tooltip("end_s:Q", title="to s"),
            alt.Tooltip("series:N"),
            alt.Tooltip("value:Q", format=",.4~g"),
            alt.Tooltip("partial:N", title="partial slice (the run ended in it)"),
        ]
        if unit == "count":
            layer = (
                alt.Chart(alt.Data(values=long), title=title)
                .mark_bar(opacity=0.75)
                .encode(
                    x=alt.X(
                        "start_s:Q", title="seconds since start", scale=alt.Scale(domain=[0, x_max])
                    ),
                    x2="end_s:Q",
                    y=_y(unit, values).stack(None),
                    color=fixed_colours("series", present),
                    tooltip=tooltip,
                )
            )
        else:
            layer = _line_panel(long, title, x=x, unit=unit, tooltip=tooltip, series=present)
        if drain is not None:
            band = drain.mark_rect(color="#8c959f", opacity=0.15).encode(
                tooltip=[alt.Tooltip("label:N", title="after the run's end: sessions closing")]
            )
            label = drain.mark_text(align="left", dx=3, dy=6, color="#57606a", fontSize=10).encode(
                x="from:Q", y=alt.value(0), text="label:N"
            )
            layer = alt.layer(layer, band, label, title=title)
        charts.append(layer.properties(width=WIDTH - 220, height=110))
    if not charts:
        return None
    return alt.vconcat(*charts, spacing=12).resolve_scale(color="independent").to_dict()


def _line_panel(
    long: Sequence[Row],
    title: Any,
    *,
    x: alt.X,
    unit: str,
    tooltip: Sequence[alt.Tooltip],
    series: Sequence[str],
    order: str = "t_s",
) -> alt.Chart:
    """One panel of long rows ({series, value, …}): a line per series, a filled point per
    row (one alone is visible), drawn in ``order`` (time, or the offered level)."""
    values = [float(r["value"]) for r in long]
    return (
        alt.Chart(alt.Data(values=list(long)), title=title)
        .mark_line(point=alt.OverlayMarkDef(size=40, filled=True))
        .encode(
            x=x,
            y=_y(unit, values),
            color=fixed_colours("series", series),
            order=alt.Order(f"{order}:Q"),
            tooltip=list(tooltip),
        )
    )


def level_panels(
    rows: Sequence[Row],
    panels: Sequence[tuple[str, Sequence[str], str]],
    *,
    unit: str,
    knee: float | None,
) -> dict[str, Any] | None:
    """The capacity search's steps seen from another side (the server's series): stacked
    panels against the offered level (``level`` in each row), by level, the knee marked on
    each; a panel with no value is left out (None when none has one)."""
    rows = sorted(rows, key=lambda r: r["level"])
    top = max((r["level"] for r in rows), default=1.0)
    x = alt.X("level:Q", title=f"offered ({unit})", scale=alt.Scale(domain=[0, top]))
    tooltip = [
        alt.Tooltip("level:Q"),
        alt.Tooltip("series:N"),
        alt.Tooltip("value:Q", format=",.4~g"),
    ]
    charts = []
    for title, fields, panel_unit in panels:
        long = [
            {"level": r["level"], "series": f, "value": r[f]}
            for r in rows
            for f in fields
            if r.get(f) is not None
        ]
        if not long:
            continue
        present = [f for f in fields if any(r["series"] == f for r in long)]
        layers: list[Any] = [
            _line_panel(
                long,
                alt.Undefined,
                x=x,
                unit=panel_unit,
                tooltip=tooltip,
                series=present,
                order="level",
            )
        ]
        if knee is not None:
            layers.append(
                alt.Chart(alt.Data(values=[{"knee": knee}]))
                .mark_rule(color="#0969da")
                .encode(x="knee:Q")
            )
        charts.append(alt.layer(*layers, title=title).properties(width=WIDTH - 220, height=110))
    if not charts:
        return None
    return alt.vconcat(*charts, spacing=12).resolve_scale(color="independent").to_dict()


def capacity_steps(
    steps: Sequence[Row], *, unit: str, threshold: float | None, stat: str, knee: float | None
) -> dict[str, Any]:
    """The capacity search: offered vs achieved per level; the judged percentile per level
    against its SLO line; the knee (largest level that passed) marked on both."""
    steps = sorted(steps, key=lambda s: s["level"])  # by level, never the order they ran
    data = alt.Data(values=list(steps))
    x = alt.X("level:Q", title=f"offered ({unit})", scale=alt.Scale(domainMin=0))
    tooltip = [alt.Tooltip(k) for k in ("level:Q", "achieved:Q", "value:Q", "passed:N", "reason:N")]
    color = alt.Color(
        "verdict:N",
        title="step",
        scale=alt.Scale(domain=["pass", "fail"], range=["#1a7f37", "#cf222e"]),
    )
    offered = (
        alt.Chart(
            alt.Data(values=[{"level": 0}, {"level": max((s["level"] for s in steps), default=1)}])
        )
        .mark_line(strokeDash=[4, 4], color="#57606a")
        .encode(x=x, y=alt.Y("level:Q"))
    )
    achieved = (
        alt.Chart(data)
        .mark_point(filled=True, size=70)
        .encode(
            x=x,
            y=alt.Y("achieved:Q", title=f"achieved ({unit})", scale=alt.Scale(domainMin=0)),
            color=color,
            tooltip=tooltip,
        )
    )
    layers_a: list[Any] = [offered, achieved]
    pct = (
        alt.Chart(data)
        .mark_point(filled=True, size=70)
        .encode(x=x, y=alt.Y("value:Q", title=stat), color=color, tooltip=tooltip)
    )
    layers_b: list[Any] = [pct]
    if threshold is not None:
        layers_b.append(
            alt.Chart(alt.Data(values=[{"slo": threshold}]))
            .mark_rule(color="#cf222e", strokeDash=[6, 3])
            .encode(y="slo:Q")
        )
    if knee is not None:
        rule = (
            alt.Chart(alt.Data(values=[{"knee": knee}]))
            .mark_rule(color="#0969da")
            .encode(x="knee:Q")
        )
        layers_a.append(rule)
        layers_b.append(rule)
    a = alt.layer(*layers_a, title="offered vs achieved (dashed: achieved = offered; blue: knee)")
    b = alt.layer(*layers_b, title=f"{stat} per step against its SLO (red dashed)")
    return alt.hconcat(
        a.properties(width=380, height=240), b.properties(width=380, height=240)
    ).to_dict()


def counts_bar(rows: Sequence[Row], *, title: str) -> dict[str, Any]:
    """Horizontal bars: rows of {label, count, kind}."""
    chart = (
        alt.Chart(alt.Data(values=list(rows)), title=title)
        .mark_bar()
        .encode(
            y=alt.Y("label:N", title=None, sort="-x"),
            x=alt.X("count:Q", title="attempts", scale=alt.Scale(domainMin=0)),
            color=fixed_colours("kind", [r["kind"] for r in rows]),
            tooltip=[alt.Tooltip("label:N"), alt.Tooltip("count:Q")],
        )
        .properties(width=WIDTH - 420, height=alt.Step(22))
    )
    return chart.to_dict()


def waveform_timeline(
    envelope: Sequence[Row], events: Sequence[Row], turns: Sequence[Row], *, x_max: float
) -> dict[str, Any]:
    """Both channels' waveforms (min/max envelope per time bin) on one time axis, with the
    conversation's events as rules and each turn as a shaded span."""
    x = alt.X("t_s:Q", title="seconds since the run started", scale=alt.Scale(domain=[0, x_max]))
    panels = []
    for channel in ("user (as sent)", "assistant (as heard)"):
        wave = (
            alt.Chart(alt.Data(values=[e for e in envelope if e["channel"] == channel]))
            .mark_area(color="#0969da" if channel.startswith("user") else "#8250df", opacity=0.8)
            .encode(x=x, y=alt.Y("lo:Q", title=None, scale=alt.Scale(domain=[-1, 1])), y2="hi:Q")
        )
        spans = (
            alt.Chart(alt.Data(values=list(turns)))
            .mark_rect(opacity=0.07, color="#57606a")
            .encode(x="start_s:Q", x2="end_s:Q", tooltip=[alt.Tooltip("turn:N")])
        )
        rules = (
            alt.Chart(alt.Data(values=[e for e in events if e["lane"] == channel]))
            .mark_rule(strokeWidth=1.5)
            .encode(
                x="t_s:Q",
                color=fixed_colours("event", [e["event"] for e in events], title="event"),
                tooltip=[
                    alt.Tooltip("event:N"),
                    alt.Tooltip("t_s:Q", format=".3f"),
                    alt.Tooltip("turn:N"),
                    alt.Tooltip("detail:N"),
                ],
            )
        )
        panels.append(
            alt.layer(spans, wave, rules, title=channel).properties(width=WIDTH - 240, height=120)
        )
    return alt.vconcat(*panels, spacing=8).resolve_scale(color="shared").to_dict()


def comparison_dots(rows: Sequence[Row]) -> dict[str, Any]:
    """Baseline vs candidate per figure and statistic, side by side on one value axis: the
    point estimates, and around the candidate the interval its change was judged by."""
    y = alt.Y("key:N", title=None, sort=None)
    color = alt.Color(
        "run:N",
        title=None,
        scale=alt.Scale(domain=["A baseline", "B candidate"], range=["#0969da", "#bc4c00"]),
    )
    base = alt.Chart().encode(y=y, yOffset=alt.YOffset("run:N"), color=color)
    bars = base.mark_rule(strokeWidth=2).encode(x=alt.X("ci_low:Q", title="ms"), x2="ci_high:Q")
    dots = base.mark_point(size=60, filled=True).encode(
        x="value:Q",
        tooltip=[
            alt.Tooltip("key:N", title="figure"),
            alt.Tooltip("run:N"),
            alt.Tooltip("value:Q", format=",.4~g"),
            alt.Tooltip("ci_low:Q", format=",.4~g"),
            alt.Tooltip("ci_high:Q", format=",.4~g"),
            alt.Tooltip("n:Q"),
        ],
    )
    return (
        alt.layer(bars, dots, data=alt.Data(values=list(rows)))
        .properties(width=WIDTH - 360, height=alt.Step(11))
        .to_dict()
    )


def evidence_timeline(evidence: Sequence[Row], *, title: str) -> dict[str, Any]:
    """A failed probe's trace: each frame or note at its time, one row per connection,
    coloured by direction (out = client → server, in = server → client, net, note)."""
    rows = [
        {
            "t_ms": e["t_ms"],
            "conn": e.get("conn", ""),
            "dir": e.get("dir", ""),
            "type": e.get("type", ""),
            "detail": e.get("detail", ""),
        }
        for e in evidence
    ]
    chart = (
        alt.Chart(alt.Data(values=rows), title=f"{title}: evidence")
        .mark_point(filled=True, size=80, shape="diamond")
        .encode(
            x=alt.X("t_ms:Q", title="ms since the probe started"),
            y=alt.Y("conn:N", title="connection"),
            color=alt.Color("dir:N", title="direction"),
            tooltip=[
                alt.Tooltip("t_ms:Q", format=".1f"),
                alt.Tooltip("conn:N"),
                alt.Tooltip("dir:N"),
                alt.Tooltip("type:N"),
                alt.Tooltip("detail:N"),
            ],
        )
        .properties(width=WIDTH - 240, height=alt.Step(28))
    )
    return chart.to_dict()
