"""The load page: verdict first, then what was run, admission and capacity, latency as HDR
percentile curves, time slices, the capacity search, validity per worker, server metrics.

Built from a load report.json alone (its ``recorder`` holds the exact histograms), so the
same function serves ``load --out`` (end of run, or Ctrl-C with the partial run) and
``duplexctl report RUN… --html`` (merged runs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from duplexctl.report.html import charts, page
from duplexctl.report.load_report import tally_of
from duplexctl.report.slo import parse_slo

#: the HDR charts: which figures go together (same unit, same question)
CURVE_GROUPS: Final = (
    ("Latency to the answer", ("ttfa_ms", "ttft_ms", "first_audible_ms", "turn_ms")),
    ("Where the time goes", ("ttfa_commit_ms", "ttfa_created_ms", "chunk_gap_ms", "stall_ms")),
    (
        "Barge-in and interruption",
        (
            "cancel_ack_ms",
            "audio_stop_ms",
            "heard_stop_ms",
            "leaked_audio_ms",
            "post_interrupt_ttfa_ms",
        ),
    ),
    ("Drops and resume", ("resume_ms", "reconnect_ms", "resume_handshake_ms", "audio_gap_ms")),
    (
        "Session lifecycle",
        (
            "connect_ms",
            "handshake_ms",
            "time_to_reject_ms",
            "close_ms",
            "slot_release_ms",
            "heartbeat_rtt_ms",
        ),
    ),
    ("Client queue", ("client_queue_ms", "ttfa_with_queue_ms", "turn_with_queue_ms")),
    ("Generator validity (the client's own pacing)", ("send_lag_ms", "loop_lag_ms")),
)
#: the time-slice panels: (title, fields, unit)
SLICE_PANELS: Final = (
    ("sessions active (mean over the slice)", ("sessions_active",), "sessions"),
    ("turns per second", ("turns_per_s",), "turns/s"),
    ("admission: attempts and rejections", ("attempts", "rejections", "errors"), "count"),
    ("ttfa percentiles", ("ttfa_p50", "ttfa_p95", "ttfa_p99"), "ms"),
)
_TIME_KEYS: Final = ("t_s", "start_s", "time_s", "elapsed_s", "t")


def build(report: Mapping[str, Any]) -> str:
    """The page's HTML for one (possibly merged, possibly interrupted) load report."""
    specs: dict[str, Any] = {}
    hs = tally_of(report).headline() if "recorder" in report else None
    groups: list[dict[str, str]] = []
    for title, names in CURVE_GROUPS:
        curves = {n: hs[n] for n in names if hs is not None and n in hs and hs[n].count}
        if curves:
            cid = f"hdr-{len(groups)}"
            specs[cid] = charts.percentile_curves(curves, title=title)
            groups.append({"id": cid, "title": title})
    slices = slice_rows(report)
    x_max = max((r["end_s"] for r in slices), default=1.0)
    if slices:
        specs["slices"] = charts.time_panels(slices, SLICE_PANELS, x_max=x_max)
    server = server_metrics(report.get("server_metrics"))
    if server["rows"]:
        specs["server-metrics"] = charts.time_panels(
            server["rows"],
            [(f, (f,), "") for f in server["fields"]],
            x_max=max(x_max, server["x_max"]),
        )
    capacity = report.get("capacity_search")
    if capacity and capacity.get("steps"):
        specs["capacity"] = capacity_chart(
            capacity, list(report.get("config", {}).get("slos") or [])
        )
    admission = report.get("admission", {})
    adm_rows = admission_rows(admission)
    if adm_rows:
        specs["admission"] = charts.counts_bar(adm_rows, title="connection attempts by outcome")
    verdict, flags = verdict_of(report)
    return page.render_verdict(
        "load.html.j2",
        command="load",
        charts=specs,
        r=report,
        verdict=verdict,
        flags=flags,
        groups=groups,
        figures=[(k, v) for k, v in report.get("figures", {}).items() if v.get("n")],
        slices=slices,
        server=server,
        capacity=capacity,
        admission=admission,
        config_rows=config_rows(report.get("config", {})),
        embedded=report.get("embedded_server") or {},
        capabilities=(report.get("server") or {}).get("capabilities") or {},
    )


def write(report: Mapping[str, Any], out_dir: Path) -> Path | None:
    """``load --out DIR``: DIR/report.html beside report.json (the run keeps its exit code
    if the page fails: see :func:`page.write_beside`)."""
    return page.write_beside(lambda: build(report), out_dir)


def verdict_of(report: Mapping[str, Any]) -> tuple[tuple[str, str], list[tuple[str, str]]]:
    """The headline ((word, css class)) and the flags that qualify it ((text, level))."""
    flags: list[tuple[str, str]] = []
    slos = report.get("slo") or []
    failed = [s for s in slos if not s.get("passed")]
    validity = report.get("validity", {})
    cap = report.get("capacity_search")
    if report.get("interrupted"):
        flags.append(("interrupted: this page shows the partial run up to Ctrl-C", "warn"))
    if validity.get("invalid_pacing"):
        flags.append(
            (f"invalid_pacing: {validity.get('note') or 'send lag p99 above one chunk'}", "bad")
        )
    low_n = [s["expr"] for s in slos if s.get("low_n")]
    if low_n:
        flags.append((f"p99 from fewer than 100 samples: {', '.join(low_n)}", "warn"))
    if cap is not None and cap.get("largest_pass") is None:
        flags.append(("capacity search: no level met the criteria", "bad"))
    attempts = report.get("admission", {}).get("attempts", 0)
    admitted = report.get("admission", {}).get("by_kind", {}).get("admitted", 0)
    if attempts and not admitted:
        flags.append(("no session was admitted", "bad"))
    if failed:
        word = ("FAIL", "fail")
    elif validity.get("invalid_pacing"):
        word = ("NOT TRUSTED", "warn")
    elif any(level == "bad" for _t, level in flags):
        word = ("FAIL", "fail")
    elif report.get("interrupted"):
        word = ("INTERRUPTED", "warn")
    elif slos or (cap is not None and cap.get("largest_pass") is not None):
        word = ("PASS", "pass")
    else:
        word = ("DONE", "info")
        flags.append(("no SLO given: nothing was judged (--slo EXPR)", "info"))
    return word, flags


def slice_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per time slice: the counts, ttfa percentiles, and the mean number of sessions
    active (from the recorder's exact session intervals)."""
    slices = report.get("slices") or []
    if not slices:
        return []
    starts = np.array([s["start_s"] for s in slices], dtype=float)
    ends = np.array([s["end_s"] for s in slices], dtype=float)
    active = np.zeros(len(slices))
    intervals = (report.get("recorder") or {}).get("intervals") or []
    if intervals:
        iv = np.array([[a, ends[-1] if b is None else b] for a, b in intervals], dtype=float)
        overlap = np.clip(
            np.minimum(iv[:, 1:2], ends[None, :]) - np.maximum(iv[:, 0:1], starts[None, :]), 0, None
        )
        active = overlap.sum(axis=0) / np.maximum(ends - starts, 1e-9)
    rows = []
    for i, s in enumerate(slices):
        ttfa = s.get("figures", {}).get("ttfa_ms", {})
        span = max(s["end_s"] - s["start_s"], 1e-9)
        rows.append(
            {
                "t_s": (s["start_s"] + s["end_s"]) / 2,
                "start_s": s["start_s"],
                "end_s": s["end_s"],
                "phase": s.get("phase", ""),
                "sessions_active": round(float(active[i]), 2),
                "turns": s.get("turns", 0),
                "turns_per_s": round(s.get("turns", 0) / span, 3),
                "attempts": s.get("attempts", 0),
                "rejections": s.get("rejections", 0),
                "errors": s.get("errors", 0),
                "ttfa_p50": ttfa.get("p50"),
                "ttfa_p95": ttfa.get("p95"),
                "ttfa_p99": ttfa.get("p99"),
                "ttfa_n": ttfa.get("n", 0),
            }
        )
    return rows


def server_metrics(section: Any) -> dict[str, Any]:
    """The server's metrics, when the run collected them (issue 19's ``server_metrics``).

    Nothing is assumed of their shape beyond being JSON: a list of records (or a dict
    holding one) with a time key is drawn on the slices' time axis, one panel per numeric
    field; anything else is shown as JSON. Absent: the page says so."""
    result: dict[str, Any] = {
        "present": section is not None,
        "rows": [],
        "fields": [],
        "x_max": 0.0,
    }
    if section is None:
        return result
    result["json"] = json.dumps(section, indent=1, default=str)[:200_000]
    records = section
    if isinstance(section, Mapping):
        records = next((v for v in section.values() if _records(v)), None)
    if not _records(records):
        return result
    tkey = next(k for k in _TIME_KEYS if all(k in r for r in records))
    fields: list[str] = []
    for r in records:
        for k, v in r.items():
            if (
                k != tkey
                and isinstance(v, int | float)
                and not isinstance(v, bool)
                and k not in fields
            ):
                fields.append(k)
    result["fields"] = fields[:12]
    result["rows"] = [
        {"t_s": float(r[tkey]), **{f: r.get(f) for f in result["fields"]}} for r in records
    ]
    result["x_max"] = max(r["t_s"] for r in result["rows"])
    return result


def _records(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(r, Mapping) for r in value)
        and any(all(k in r for r in value) for k in _TIME_KEYS)
    )


def capacity_chart(capacity: Mapping[str, Any], slos: Sequence[str]) -> dict[str, Any]:
    """The search's steps: offered level, what was achieved, ttfa p95 against its SLO."""
    unit = capacity.get("unit", "sessions")
    duration = float(capacity.get("step_duration_s") or 0) or 1.0
    rows = [
        {
            "level": s["level"],
            "achieved": s.get("observed_capacity")
            if unit == "sessions"
            else round(s.get("admitted", 0) / duration, 3),
            "value": s.get("ttfa_p95"),
            "passed": s["passed"],
            "verdict": "pass" if s["passed"] else "fail",
            "reason": s.get("reason", ""),
        }
        for s in capacity["steps"]
    ]
    threshold = None
    for expr in slos:
        try:
            slo = parse_slo(expr)
        except ValueError:
            continue
        if slo.metric in ("ttfa", "ttfa_ms") and slo.stat == "p95":
            threshold = slo.threshold
    return charts.capacity_steps(
        rows,
        unit=unit,
        threshold=threshold,
        stat="ttfa p95 (ms)",
        knee=capacity.get("largest_pass"),
    )


def admission_rows(admission: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = [
        {
            "label": "admitted",
            "count": admission.get("by_kind", {}).get("admitted", 0),
            "kind": "admitted",
        }
    ]
    for key, n in (admission.get("by_code") or {}).items():
        kind, _, code = key.partition(":")
        rows.append({"label": f"{kind}: {code}" if code else kind, "count": n, "kind": kind})
    return [r for r in rows if r["count"]]


def config_rows(config: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(setting, value, origin) for the settings that were asked for (not None)."""
    origin = config.get("origin", {})
    skip = {
        "origin",
        "server_overrides",
        "session_extra",
        "notes",
        "out",
        "overwrite",
        "json_output",
        "live",
    }
    return [
        (k, v if isinstance(v, str) else json.dumps(v, default=str), origin.get(k, ""))
        for k, v in config.items()
        if k not in skip and v is not None and v != [] and v != {}
    ]
