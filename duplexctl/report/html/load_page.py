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

from duplexctl.behaviour.figures import ORIGINS as BEHAVIOUR_ORIGINS
from duplexctl.report.histogram import RATIO_METRICS
from duplexctl.report.html import charts, page
from duplexctl.report.html import server_metrics as sm
from duplexctl.report.load_report import measured_nothing, server_audio, tally_of
from duplexctl.report.slices import run_span_s
from duplexctl.report.slo import parse_slo
from duplexctl.rundir import Writes

#: the HDR charts: which figures go together (same unit, same question)
CURVE_GROUPS: Final = (
    ("Latency to the answer", ("ttfa_ms", "ttft_ms", "first_audible_ms", "turn_ms")),
    ("Where the time goes", ("ttfa_commit_ms", "ttfa_created_ms", "chunk_gap_ms", "stall_ms")),
    ("Audio continuity: vLLM-Omni's worst underrun per response", ("audio_underrun_ms",)),
    ("The joining session (N + 1)", ("join_ttfa_ms", "join_handshake_ms", "join_turn_ms")),
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
#: the conversation-behaviour group (docs/metrics.md "Conversation behaviour"): its own
#: section, since these are not latencies of the server's answer but how the model converses
BEHAVIOUR_CURVES: Final = ("stop_latency_ms", "response_gap_ms")
#: the behaviour rates: (name, the count that is its n, what that n counts)
BEHAVIOUR_RATES: Final = (
    ("takeover_rate", "pause_trials", "pauses"),
    ("no_response_rate", "turn_ends", "real turn ends"),
    ("backchannels_per_min", "user_speech_ms", "ms of user speech"),
)
#: the time-slice panels: (title, fields, unit)
SLICE_PANELS: Final = (
    ("sessions active (mean over the slice)", ("sessions_active",), "sessions"),
    ("turns per second", ("turns_per_s",), "turns/s"),
    ("admission: attempts and rejections", ("attempts", "rejections", "errors"), "count"),
    ("ttfa percentiles", ("ttfa_p50", "ttfa_p95", "ttfa_p99"), "ms"),
)


#: the level sweep's curves against the offered level: (title, series, unit); each series is
#: a field of :func:`sweep_rows`
SWEEP_PANELS: Final = (
    (
        "time to first audio: the N sessions, the joining session, the N = 1 baseline (ms)",
        ("ttfa p50", "ttfa p95", "join ttfa p50", "join ttfa p95", "N = 1 ttfa p50"),
        "ms",
    ),
    ("vLLM-Omni's worst underrun per response (ms)", ("underrun p50", "underrun p95", "underrun max"), "ms"),
    ("continuity OK rate at each threshold", (), "fraction"),  # the thresholds' series
    ("sessions with RTF < 1", ("RTF < 1 share",), "fraction"),
    ("session real-time factor", ("session RTF p50", "session RTF p95"), "RTF"),
    ("takeover rate", ("takeover rate",), "fraction"),
    (
        "stop latency and response gap (ms)",
        ("stop latency p50", "stop latency p95", "response gap p50", "response gap p95"),
        "ms",
    ),
    ("frame-locked lane: frames received / frames sent", ("frame coverage",), "fraction"),
    ("frame-locked lane: frame deficit at end of call, all sessions", ("frame deficit",), "frames"),
    ("the server's own: vllm_omni:audio_underrun_s mean (ms)", ("server underrun mean",), "ms"),
    ("the server's own: continuity OK rate (vllm_omni:audio_continuity_ok)", (), "fraction"),
)  # fmt: skip


def _stat(stats: Mapping[str, Any] | None, key: str) -> float | None:
    return None if not stats else stats.get(key)


def sweep_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per level of a sweep, flat, for the curves: the table's figures and the
    server's own per level (``server_metrics.steps``, by level)."""
    sweep = report.get("sweep") or {}
    base = _stat((sweep.get("baseline") or {}).get("ttfa_ms"), "p50")
    steps = {
        str(st.get("label")): st.get("audio") or {}
        for st in (report.get("server_metrics") or {}).get("steps", [])
    }
    rows = []
    for r in sweep.get("levels", []):
        cont, beh, join = r["continuity"], r["behaviour"], r["join"]
        row: dict[str, Any] = {
            "level": r["level"],
            "ttfa p50": _stat(r["ttfa_ms"], "p50"),
            "ttfa p95": _stat(r["ttfa_ms"], "p95"),
            "join ttfa p50": _stat(join["join_ttfa_ms"], "p50"),
            "join ttfa p95": _stat(join["join_ttfa_ms"], "p95"),
            "N = 1 ttfa p50": base,
            "underrun p50": _stat(cont["audio_underrun_ms"], "p50"),
            "underrun p95": _stat(cont["audio_underrun_ms"], "p95"),
            "underrun max": _stat(cont["audio_underrun_ms"], "max"),
            "RTF < 1 share": cont["session_rtf_below_1_rate"],
            "session RTF p50": _stat(cont["session_rtf"], "p50"),
            "session RTF p95": _stat(cont["session_rtf"], "p95"),
            "takeover rate": beh["takeover_rate"],
            "stop latency p50": _stat(beh["stop_latency_ms"], "p50"),
            "stop latency p95": _stat(beh["stop_latency_ms"], "p95"),
            "response gap p50": _stat(beh["response_gap_ms"], "p50"),
            "response gap p95": _stat(beh["response_gap_ms"], "p95"),
        }
        for t, rate in cont["ok_rate"].items():
            row[f"OK at {t} ms"] = rate
        frames = r.get("frames")
        if frames:  # a frame-locked lane (report/frames.py)
            row["frame coverage"] = frames["coverage"]
            row["frame deficit"] = frames["frame_deficit"]
        server = steps.get(str(r["level"])) or {}
        under = server.get("audio_underrun_s") or {}
        if under.get("mean") is not None:
            row["server underrun mean"] = under["mean"] * 1000.0
        for t, rate in (server.get("continuity_ok_rate") or {}).items():
            row[f"server OK at {t} ms"] = rate
        rows.append(row)
    return rows


def sweep_chart(report: Mapping[str, Any]) -> dict[str, Any] | None:
    """The sweep's figures as curves against the offered level (none: fewer than two
    levels, a sentence says so)."""
    rows = sweep_rows(report)
    if len(rows) < charts.MIN_POINTS:
        return None
    ok = sorted({k for r in rows for k in r if k.startswith("OK at ")}, key=_threshold)
    server_ok = sorted(
        {k for r in rows for k in r if k.startswith("server OK at ")}, key=_threshold
    )
    panels: list[tuple[str, tuple[str, ...], str]] = []
    for title, named, unit in SWEEP_PANELS:
        fields: tuple[str, ...] = named
        if title.startswith("continuity OK rate"):
            fields = tuple(ok)
        elif "audio_continuity_ok" in title:
            fields = tuple(server_ok)
        panels.append((title, fields, unit))
    return charts.level_panels(rows, panels, unit="sessions", knee=None)


def _threshold(name: str) -> int:
    return int("".join(ch for ch in name if ch.isdigit()) or 0)


def build(report: Mapping[str, Any]) -> str:
    """The page's HTML for one (possibly merged, possibly interrupted) load report."""
    specs: dict[str, Any] = {}
    sweep = report.get("sweep")
    if sweep and (spec := sweep_chart(report)) is not None:
        specs["sweep-curves"] = spec
    hs = tally_of(report).headline() if "recorder" in report else None
    groups: list[dict[str, str]] = []
    few: list[str] = []  # what had too little data to draw: one sentence each
    for title, names in CURVE_GROUPS:
        curves = _curves(hs, names, few)
        if curves:
            cid = f"hdr-{len(groups)}"
            specs[cid] = charts.percentile_curves(curves, title=title)
            groups.append({"id": cid, "title": title})
    behaviour = behaviour_rows(report)
    curves = _curves(hs, BEHAVIOUR_CURVES, few)
    if curves:
        specs["behaviour-hdr"] = charts.percentile_curves(curves, title="Conversation behaviour")
    rtf = _curves(hs, ("session_rtf",), few)
    if rtf:
        specs["session-rtf"] = charts.percentile_curves(
            rtf, unit="real-time factor", title="Session real-time factor (1 = real time)"
        )
    slices = slice_rows(report)
    servers = server_sections(report)
    # one run's server slices are the report's slices; merged runs' each have their own clock
    drawn = len(slices) >= charts.MIN_POINTS
    shared = next((s for s in servers if s["source"] is None), None) if drawn else None
    if drawn and (spec := slices_chart(slices, shared)) is not None:
        specs["slices"] = spec
    for i, server in enumerate(servers):
        server["id"] = f"server-{i}"
        server["shares_slices"] = server is shared and bool(server["slice_rows"])
        rows = server["slice_rows"]
        if len(rows) >= charts.MIN_POINTS and not server["shares_slices"]:
            spec = charts.time_panels(
                rows, sm.panels(rows, per="slice"), x_max=max(r["end_s"] for r in rows)
            )
            if spec is not None:
                specs[server["id"]] = spec
    capacity = report.get("capacity_search")
    if capacity and capacity.get("steps"):
        specs["capacity"] = capacity_chart(
            capacity, list(report.get("config", {}).get("slos") or [])
        )
    for server in servers:
        if capacity and server.get("step_rows"):
            rows = server["step_rows"]
            spec = charts.level_panels(
                rows,
                sm.panels(rows, per="step"),
                unit=capacity.get("unit", "sessions"),
                knee=capacity.get("largest_pass"),
            )
            if spec is not None:
                specs[f"{server['id']}-steps"] = spec
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
        behaviour=behaviour,
        figures=[(k, v) for k, v in report.get("figures", {}).items() if v.get("n")],
        slices=slices,
        few=few,
        slices_note=slices_note(report, slices),
        servers=servers,
        server_raw=server_raw(report),
        capacity=capacity,
        sweep=sweep,
        sweep_levels=(sweep or {}).get("levels") or [],
        continuity=report.get("continuity") or {},
        server_audio=server_audio(report),
        environment=report.get("environment") or {},
        admission=admission,
        config_rows=config_rows(report.get("config", {})),
        embedded=report.get("embedded_server") or {},
        capabilities=(report.get("server") or {}).get("capabilities") or {},
    )


def _curves(hs: Any, names: Sequence[str], few: list[str]) -> dict[str, Any]:
    """The figures of ``names`` with enough samples for a curve; the rest (one sample) get
    a sentence in ``few``: one value is a value, not a distribution."""
    curves = {}
    for name in names:
        if hs is None or name not in hs or not hs[name].count:
            continue
        if hs[name].count < charts.MIN_POINTS:
            unit = "" if name in RATIO_METRICS else " ms"
            few.append(f"{name}: 1 sample ({hs[name].max:.4g}{unit}), no curve to draw.")
        else:
            curves[name] = hs[name]
    return curves


def slices_note(report: Mapping[str, Any], slices: Sequence[Mapping[str, Any]]) -> str:
    """What the time panels cannot show, in a sentence (too few slices; a partial last one)."""
    slice_s = (report.get("slicing") or {}).get("slice_s")
    if 0 < len(slices) < charts.MIN_POINTS:
        return (
            f"One time slice only (the run lasted {run_span_s(report):.3g} s, a slice is "
            f"{slice_s:g} s): nothing to draw over time; its figures are the run's, above."
        )
    if slices and slices[-1].get("partial"):
        last = slices[-1]
        text = (
            f"The last slice is partial: the run ended at {last['end_s']:.3g} s, so it is "
            f"drawn from {last['start_s']:g} s to there (its rates are over that span)"
        )
        if (start := drain_from(slices)) is not None:
            text += (
                f"; after {start:g} s (the run's planned end) its sessions were closing: "
                "shaded as the drain"
            )
        return text + "."
    return ""


def write(report: Mapping[str, Any], out_dir: Path, writes: Writes | None = None) -> Path | None:
    """``load --out DIR``: DIR/report.html beside report.json (the run keeps its exit code
    if the page fails: see :func:`page.write_beside`)."""
    return page.write_beside(lambda: build(report), out_dir, writes)


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
    empty = measured_nothing(report)
    if empty:
        flags.append((empty, "bad"))
    sweep = report.get("sweep")
    for row in (sweep or {}).get("levels", []):
        if not row["passed"]:
            flags.append((f"level {row['level']} sessions: {row['reason']}", "bad"))
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
    elif sweep and sweep.get("levels"):
        word = ("DONE", "info")
        flags.append(("no SLO given: each level judged on admission and pacing only", "info"))
    else:
        word = ("DONE", "info")
        flags.append(("no SLO given: nothing was judged (--slo EXPR)", "info"))
    return word, flags


def behaviour_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The behaviour rates, each with its n and the trials behind it, of the report's
    ``behaviour`` section (none when no session had a conversation timeline to read)."""
    section = report.get("behaviour") or {}
    if not any(section.get(n) for _rate, n, _what in BEHAVIOUR_RATES):
        return []
    return [
        {
            "name": rate,
            "value": section.get(rate),
            "n": section.get(n, 0),
            "n_of": what,
            "origin": BEHAVIOUR_ORIGINS.get(rate, ""),
        }
        for rate, n, what in BEHAVIOUR_RATES
    ]


def slice_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per time slice: the counts, ttfa percentiles, and the mean number of sessions
    active (from the recorder's exact session intervals)."""
    slices = report.get("slices") or []
    if not slices:
        return []
    starts = np.array([s["start_s"] for s in slices], dtype=float)
    ends = np.array([s["end_s"] for s in slices], dtype=float)
    # the last slice ends where the run did, not at its boundary: drawn to its true end, its
    # means and rates over the time it had (a 20.7 s run's slice 20-30 s lasted 0.7 s)
    span = run_span_s(report)
    partial = starts[-1] < span < ends[-1]
    if partial:
        ends[-1] = span
    config = report.get("config") or {}
    planned = (
        float(config.get("warmup_s") or 0) + float(config["duration_s"])
        if config.get("duration_s") and not report.get("runs")
        else None
    )
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
        end = float(ends[i])
        span = max(end - s["start_s"], 1e-9)
        rows.append(
            {
                "t_s": (s["start_s"] + end) / 2,
                "start_s": s["start_s"],
                "end_s": end,
                "partial": bool(partial and i == len(slices) - 1),
                "planned_end_s": planned,
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


def server_sections(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The server's metrics of the run (``server_metrics``), or of each merged run
    (``server_metrics_by_run``, each on its own clock): what the page shows of each."""
    sections = [report.get("server_metrics"), *(report.get("server_metrics_by_run") or [])]
    return [
        {**sm.view(s), "slice_rows": sm.slice_rows(s), "step_rows": sm.step_rows(s)}
        for s in sections
        if sm.documented(s)
    ]


def server_raw(report: Mapping[str, Any]) -> str | None:
    """A ``server_metrics`` section of another shape than docs/metrics.md's, as recorded."""
    section = report.get("server_metrics")
    return None if section is None or sm.documented(section) else sm.raw(section)


def slices_chart(
    slices: list[dict[str, Any]], server: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The client's time slices, and under them the server's key series per slice: one
    stack of panels on one x axis (the server's slices are the report's slices)."""
    panels = list(SLICE_PANELS)
    x_max = max(r["end_s"] for r in slices)
    if server and server.get("slice_rows"):
        by_start = {r["start_s"]: r for r in server["slice_rows"]}  # the same slices
        for row in slices:
            row.update({k: v for k, v in by_start.get(row["start_s"], {}).items() if k not in row})
        panels += sm.panels(server["slice_rows"], per="slice")
    return charts.time_panels(slices, panels, x_max=x_max, drain_from=drain_from(slices))


def drain_from(slices: Sequence[Mapping[str, Any]]) -> float | None:
    """Where the run's planned time ended and its sessions began closing (the partial last
    slice's drain), or None (the run did not outlast it, or it is unknown)."""
    last = slices[-1] if slices else {}
    planned = last.get("planned_end_s")
    return float(planned) if last.get("partial") and planned is not None else None


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
