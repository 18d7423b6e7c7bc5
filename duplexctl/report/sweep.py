"""A level sweep's report (``load --sweep 1,2,4,8,16``): one row per level, rebuilt exactly.

Each level is one step of the capacity search's machinery (``load/search.py``): a timed
closed-loop run of N sessions, judged by the same rules (:mod:`duplexctl.report.steps`). The
sweep keeps every level's tally (``sweep.data``: the encoded histograms and counts, its wall
time, workers and tries), so its per-level table is a function of those alone
(:func:`level_row`): ``duplexctl report RUN`` recomputes it from them and gets the same
rows, and ``duplexctl report A B`` merges two sweeps of the same levels level by level,
bucket for bucket (:func:`merge`). The row of a level: its verdict and why, admission,
ttfa, the joining session's figures beside the N = 1 baseline, audio continuity (vLLM-Omni's
worst underrun, the OK rate at each threshold, what was not measured), the sessions'
real-time factor, and how the conversation behaved (takeover rate, stop latency, response
gap). What the server said per level (its own continuity metrics) is kept apart, under
``server`` of each row's level in ``server_metrics.steps``, since it is re-summarised from
``server_metrics.jsonl``, not from the tallies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from duplexctl.report import steps as rules
from duplexctl.report.load_report import build_report, tally_of
from duplexctl.report.slo import parse_slos
from duplexctl.report.summary import format_value
from duplexctl.report.tally import RunTally

#: the percentiles of a histogram figure a row carries
STATS: Final = ("n", "p50", "p95", "max")


def _stats(report: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    f = report["figures"].get(name)
    if not f or not f.get("n"):
        return None
    return {k: f[k] for k in STATS}


def level_report(
    level: int, data: Mapping[str, Any], config: Mapping[str, Any], chunk_ms: int
) -> dict[str, Any]:
    """The report of one level, built from its saved tally (what the run built then)."""
    tally = RunTally.decode(data["recorder"])
    return build_report(
        tally,
        config={**config, "sweep": None, "sessions": level, "duration_s": data["duration_s"]},
        workers=list(data.get("workers") or []),
        wall_s=float(data["wall_s"]),
        chunk_ms=chunk_ms,
        url=None,
        capabilities=tally.capabilities,
    )


def level_row(
    level: int, report: Mapping[str, Any], slos: Sequence[str], runs: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """One level's row of the table, from its report (see the module docstring)."""
    parsed = parse_slos(slos)
    results = rules.results_of(report, parsed)
    missing = rules.unjudged(report, results)
    reasons = rules.reasons(report, results, missing, runs)
    adm, counts = report["admission"], tally_of(report).counts
    cont = report.get("continuity") or {}
    beh = report.get("behaviour") or {}
    join_causes = {
        k.removeprefix("join.not_admitted."): n
        for k, n in sorted(counts.items())
        if k.startswith("join.not_admitted.")
    }
    return {
        "level": level,
        "passed": not reasons,
        "reason": "; ".join(reasons),
        "slo": [r.to_dict() for r in results],
        "attempts": adm["attempts"],
        "admitted": adm["by_kind"].get("admitted", 0),
        "rejection_rate": adm["rejection_rate"],
        "observed_capacity": adm["observed_capacity"],
        "turns": report["turns"]["count"],
        "ttfa_ms": _stats(report, "ttfa_ms"),
        "join": {
            "attempts": counts.get("join.attempts", 0),
            "admitted": counts.get("join.admitted", 0),
            "answered": counts.get("join.answered", 0),
            "not_admitted": join_causes,
            "join_ttfa_ms": _stats(report, "join_ttfa_ms"),
            "join_handshake_ms": _stats(report, "join_handshake_ms"),
            "join_turn_ms": _stats(report, "join_turn_ms"),
        },
        "continuity": {
            "measured": cont.get("measured", 0),
            "not_measured": dict(cont.get("not_measured") or {}),
            "audio_underrun_ms": _stats(report, "audio_underrun_ms"),
            "ok_rate": dict(cont.get("ok_rate") or {}),
            "sessions_with_rtf": (cont.get("sessions") or {}).get("with_rtf", 0),
            "session_rtf": _stats(report, "session_rtf"),
            "session_rtf_below_1_rate": (cont.get("sessions") or {}).get("rtf_below_1_rate"),
        },
        "behaviour": {
            "takeover_rate": beh.get("takeover_rate"),
            "pause_trials": beh.get("pause_trials", 0),
            "stop_latency_ms": _stats(report, "stop_latency_ms"),
            "response_gap_ms": _stats(report, "response_gap_ms"),
        },
        "invalid_pacing": bool(report["validity"]["invalid_pacing"]),
        # frame accounting at this level; None when the lane is not frame-locked
        "frames": report.get("frames"),
    }


def baseline(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The N = 1 baseline the joining session is read against: level 1's ttfa, or why
    there is none."""
    one = next((r for r in rows if r["level"] == 1), None)
    if one is None:
        return {"level": 1, "ttfa_ms": None, "note": "level 1 is not in --sweep: no baseline"}
    if one["ttfa_ms"] is None:
        return {"level": 1, "ttfa_ms": None, "note": "level 1 measured no ttfa"}
    return {"level": 1, "ttfa_ms": one["ttfa_ms"], "note": ""}


def rows_of(
    sweep: Mapping[str, Any], config: Mapping[str, Any], chunk_ms: int
) -> list[dict[str, Any]]:
    """Every level's row, recomputed from the saved tallies (``duplexctl report``)."""
    slos = list(config.get("slos") or [])
    return [
        level_row(
            int(d["level"]), level_report(int(d["level"]), d, config, chunk_ms), slos, d["runs"]
        )
        for d in sweep.get("data", [])
    ]


def lead(report: Mapping[str, Any], sweep: Mapping[str, Any]) -> dict[str, Any]:
    """``report`` with ``sweep`` as its first section (after ``kind`` and ``version``), and
    the SLO verdicts of the level its own sections are (``figures_from``)."""
    head = {k: report[k] for k in ("kind", "version") if k in report}
    out = {**head, "sweep": dict(sweep)}
    out.update({k: v for k, v in report.items() if k not in out})
    rows = sweep.get("levels") or []
    last = next((r for r in rows if r["level"] == sweep.get("figures_from")), None)
    if last is not None:
        out["slo"] = list(last["slo"])
    return out


def rebuild(report: dict[str, Any]) -> dict[str, Any]:
    """A saved sweep report with its table recomputed from its levels' tallies."""
    sweep = report.get("sweep")
    if not sweep:
        return report
    chunk_ms = int((report.get("validity") or {}).get("chunk_ms", 100))
    rows = rows_of(sweep, report.get("config") or {}, chunk_ms)
    return lead(report, {**sweep, "levels": rows, "baseline": baseline(rows)})


def merge(docs: Sequence[Mapping[str, Any]], sources: Sequence[str]) -> dict[str, Any]:
    """Several saved sweeps of the same levels: each level's tallies added bucket for
    bucket, wall times added, workers listed; ``ValueError`` when the levels differ."""
    first = docs[0]["sweep"]
    levels = [d["level"] for d in first["data"]]
    for src, doc in zip(sources, docs, strict=True):
        other = doc.get("sweep")
        if not other:
            raise ValueError(f"{src}: not a level sweep (a sweep merges only with sweeps)")
        if [d["level"] for d in other["data"]] != levels:
            raise ValueError(
                f"{src}: levels {[d['level'] for d in other['data']]} differ from {levels}"
            )
    data = []
    for i, level in enumerate(levels):
        parts = [doc["sweep"]["data"][i] for doc in docs]
        tally = RunTally.decode(parts[0]["recorder"])
        for part in parts[1:]:
            tally.merge_encoded(part["recorder"])
        data.append(
            {
                "level": level,
                "recorder": tally.encode(),
                "wall_s": sum(float(p["wall_s"]) for p in parts),
                "duration_s": parts[0]["duration_s"],
                "workers": [dict(w, run=k) for k, p in enumerate(parts) for w in p["workers"]],
                "runs": [r for p in parts for r in p["runs"]],
            }
        )
    return {**first, "data": data, "merged_from": list(sources)}


def lines(sweep: Mapping[str, Any]) -> list[str]:
    """The summary's first section: the per-level table, one line per level."""
    rows = sweep.get("levels") or []
    if not rows:
        return ["sweep: no level was completed (the sweep was stopped first)"]
    unit = sweep.get("unit", "sessions")
    base = sweep.get("baseline") or {}
    out = [
        f"sweep: {len(rows)} levels of {float(sweep.get('step_duration_s') or 0):g} s "
        f"({', '.join(str(r['level']) for r in rows)} {unit}); the N = 1 baseline ttfa p50 "
        + (
            format_value(base["ttfa_ms"]["p50"]) + " ms"
            if base.get("ttfa_ms")
            else base.get("note", "–")
        )
    ]
    thresholds = sweep.get("thresholds_ms") or []
    out.append(
        "  (per level: ttfa of the N sessions; the joining session's ttfa; vLLM-Omni's worst "
        "underrun and the continuity-OK rate at each threshold in ms; sessions with RTF < 1; "
        "takeover rate, stop latency, response gap; – = not measured)"
    )
    for r in rows:
        ttfa, join = r["ttfa_ms"], r["join"]
        jt = join["join_ttfa_ms"]
        cont, beh = r["continuity"], r["behaviour"]
        worst = cont["audio_underrun_ms"]
        oks = " ".join(f"{t}:{_pct(cont['ok_rate'].get(str(t)))}" for t in thresholds)
        refused = ", ".join(f"{c} {n}" for c, n in join["not_admitted"].items())
        joined = f"n={jt['n'] if jt else 0} of {sweep.get('join_samples', 0)}" + (
            f"; refused: {refused}" if refused else ""
        )
        not_measured = sum(cont["not_measured"].values())
        out.append(
            f"  {r['level']:>4} {unit}: {'pass' if r['passed'] else 'FAIL'}"
            f" | ttfa p50 {_p(ttfa, 'p50')} p95 {_p(ttfa, 'p95')}"
            f" | join ttfa p50 {_p(jt, 'p50')} p95 {_p(jt, 'p95')} ({joined})"
            f" | underrun p95 {_p(worst, 'p95')} ok {oks or '–'}"
            + (f" ({not_measured} not measured)" if not_measured else "")
            + f" | RTF<1 {_pct(cont['session_rtf_below_1_rate'])} of {cont['sessions_with_rtf']}"
            + f" | takeover {_pct(beh['takeover_rate'])} stop p95 {_p(beh['stop_latency_ms'], 'p95')}"
            + f" gap p95 {_p(beh['response_gap_ms'], 'p95')}"
            + _frames_text(r.get("frames"))
            + (f" — {r['reason']}" if r["reason"] else "")
        )
    return out


def _frames_text(frames: Mapping[str, Any] | None) -> str:
    """A level's frame accounting, on a frame-locked lane only."""
    if not frames:
        return ""
    return (
        f" | frames coverage {_pct(frames['coverage'])} deficit {frames['frame_deficit']}"
        f" in {frames['sessions_with_deficit']} of {frames['sessions']}"
    )


def _p(stats: Mapping[str, Any] | None, key: str) -> str:
    return "–" if not stats else f"{format_value(stats[key])}"


def _pct(rate: float | None) -> str:
    return "–" if rate is None else f"{format_value(rate * 100)}%"
