"""A load run's report: built from a (merged) tally, written, rendered, judged.

The report is built by one function, :func:`build_report`, from the run's
:class:`~duplexctl.report.tally.RunTally`; ``duplexctl report`` rebuilds it the same way
after merging saved runs, so a merged report is exactly the report one run of the combined
load would have written. It carries its own inputs (``recorder``: encoded histograms, counts,
session intervals) for that, and says under ``slicing`` which slice length it used (a long
run doubles ``--slice`` to keep at most :data:`~duplexctl.report.slices.MAX_SLICES`). Both
``load`` and ``report`` import this module; it imports neither (docs/architecture.md: imports
run downward).

Admission rates (docs/metrics.md "Session and admission"): every attempt ends admitted,
rejected for capacity, or failed (refused, TLS, an HTTP status, closed after the upgrade, a
timeout, another rejection: its ``cause``). ``rejection_rate`` is every attempt not admitted
over attempts — a failed attempt is a user who got no session, so a server nobody could
reach reads 100 %, never 0 % — and splits into ``capacity_rejection_rate`` (the server was
full) and ``failure_rate`` (everything else).

Validity (docs/metrics.md): a run whose send lag p99 exceeds one chunk period paced its audio
late, so the server heard a slower user than scripted; such a run is marked
``invalid_pacing`` and its latency figures are not to be trusted.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from duplexctl import __version__
from duplexctl.behaviour.figures import ORIGINS as BEHAVIOUR_ORIGINS
from duplexctl.protocol import cadence
from duplexctl.report import continuity, frames
from duplexctl.report.slo import HISTOGRAM_METRICS_IN_ORDER
from duplexctl.report.summary import format_value, histogram_table
from duplexctl.report.tally import RunTally
from duplexctl.report.turns import ORIGINS
from duplexctl.rundir import JsonLines, Writes, write_atomic
from duplexctl.terminal import csv_cell

KIND: Final = "duplexctl.load"
SESSION_ORIGINS: Final = {
    "connect_ms": "websocket open complete - connect start",
    "handshake_ms": "recv session.created - send first session.update",
    "time_to_reject_ms": "recv of the rejecting error - send session.update",
    "close_ms": "recv session.closed - send session.close",
    "send_lag_ms": "actual send - scheduled send (t0 + k*chunk_ms), every append",
    "loop_lag_ms": "event-loop wake-up lateness, sampled every 100 ms",
    "client_queue_ms": "session start - scheduled arrival (waiting for a client-side slot)",
    "ttfa_with_queue_ms": "ttfa_ms + client_queue_ms (first turn of each session)",
    "turn_with_queue_ms": "turn_ms + client_queue_ms (first turn of each session)",
    "chunk_gap_ms": "recv audio delta - recv previous audio delta of the same response, every gap",
    "session_rtf": "mean of the session's responses' rtf_omni (vLLM-Omni's duplex session "
    "rtf), one sample per session with an audio response",
    "join_ttfa_ms": "ttfa_ms of the first turn of the session that joins N sessions in steady "
    "state (--sweep)",
    "join_handshake_ms": "handshake_ms of the joining session (--sweep)",
    "join_turn_ms": "turn_ms of the joining session's first turn (--sweep)",
}


def origin_of(metric: str) -> str:
    return SESSION_ORIGINS.get(metric) or ORIGINS.get(metric) or BEHAVIOUR_ORIGINS.get(metric, "")


def _rate(num: float, den: float) -> float | None:
    return num / den if den else None


def behaviour_rates(counts: Mapping[str, int]) -> dict[str, float | None]:
    """The behaviour rates of all sessions together, from their added-up counts (the n of
    each is in the report's ``behaviour`` section: pause_trials, turn_ends, user_speech_ms)."""
    speech_min = counts["behaviour.user_speech_ms"] / 60000.0
    return {
        "takeover_rate": _rate(counts["behaviour.takeovers"], counts["behaviour.pause_trials"]),
        "no_response_rate": _rate(
            counts["behaviour.unanswered_turn_ends"], counts["behaviour.turn_ends"]
        ),
        "backchannels_per_min": _rate(counts["behaviour.backchannels"], speech_min),
    }


def offered_load(config: Mapping[str, Any], *, observed: int, queued: int) -> dict[str, Any]:
    """What the run offered the server (docs/metrics.md "Offered load"): the loop, its
    sessions or rate and arrival process, a ramp, the client's own limit
    (``--max-concurrency``) and how many arrivals queued for it; and whether the observed
    capacity is only what the client offered or allowed (then it says nothing of the
    server's capacity but that it is at least that)."""
    ramp = config.get("ramp")
    if config.get("find_capacity"):
        return {
            "loop": "open" if config.get("rate") is not None else "closed",
            "text": "a capacity search: each step offers its own level (see the steps)",
            "client_limit": None,
            "queued_on_client": queued,
            "observed_is_offered": False,
        }
    if config.get("rate") is None:
        sessions = config.get("sessions")
        peak = sessions
        if ramp:
            text = f"concurrent sessions following the ramp {ramp} (closed loop)"
            targets = [float(p.rpartition(":")[2]) for p in str(ramp).split(",") if ":" in p]
            peak = math.floor(max(targets)) if targets else None
        else:
            text = f"{sessions} sessions at once (closed loop: each speaks its turns, closes and starts over)"
        return {
            "loop": "closed",
            "sessions": sessions,
            "ramp": ramp,
            "text": text,
            "client_limit": None,
            "queued_on_client": 0,
            "observed_is_offered": peak is not None and observed >= peak,
            "offered_peak": peak,
        }
    arrival = str(config.get("arrival") or "poisson")
    process = {"poisson": "Poisson", "constant": "evenly spaced", "gamma": "gamma"}.get(
        arrival, arrival
    )
    if arrival == "gamma":
        process += f" (burstiness {config.get('burstiness', 1.0):g})"
    limit = config.get("max_concurrency")
    rate = (
        f"the ramp {ramp} new sessions/s" if ramp else f"{float(config['rate']):g} new sessions/s"
    )
    text = f"{rate}, {process} arrivals (open loop)"
    if limit:
        text += f", at most {limit} in flight (the client's limit, --max-concurrency)"
    return {
        "loop": "open",
        "rate": config.get("rate"),
        "arrival": arrival,
        "burstiness": config.get("burstiness"),
        "ramp": ramp,
        "text": text,
        "client_limit": limit,
        "queued_on_client": queued,
        "observed_is_offered": limit is not None and observed >= int(limit),
        "offered_peak": limit,
    }


def ray_nodes(workers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The Ray nodes a ``--ray`` run's workers ran on ([] for a local run, whose workers
    name no node), each by its address and host with its id alongside, its workers and the
    sessions they started; a node's label is what a reader finds it by (``10.0.0.5 (gpu-2)``)."""
    nodes: dict[str, dict[str, Any]] = {}
    for w in workers:
        node = w.get("node")
        if node is None:
            continue
        entry = nodes.setdefault(
            str(node),
            {
                "node": str(node),
                "node_ip": w.get("node_ip"),
                "host": w.get("host"),
                "workers": 0,
                "sessions_started": 0,
                "lost": False,
            },
        )
        entry["workers"] += 1
        entry["sessions_started"] += int(w.get("sessions_started") or 0)
        entry["lost"] = entry["lost"] or bool(w.get("lost"))
    for entry in nodes.values():
        where = entry["node_ip"] or entry["host"] or "unknown address"
        if entry["host"] and entry["node_ip"] and entry["host"] != entry["node_ip"]:
            where = f"{entry['node_ip']} ({entry['host']})"
        entry["label"] = f"{where}, node {entry['node'][:12]}"
    return sorted(nodes.values(), key=lambda e: (str(e["node_ip"]), str(e["host"]), e["node"]))


def build_report(
    tally: RunTally,
    *,
    config: Mapping[str, Any],
    workers: list[dict[str, Any]],
    wall_s: float,
    chunk_ms: int,
    url: str | None,
    embedded: Mapping[str, Any] | None = None,
    capabilities: Mapping[str, Any] | None = None,
    interrupted: bool = False,
    end_reason: str = "",
    extra: Mapping[str, Any] | None = None,
    runs: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The report.json document (see the module docstring).

    ``runs`` (:func:`run_summary` of each) when ``tally`` merges separate saved runs: the
    figures that do not add across runs come from them (:data:`MERGE_RULES`), and
    ``wall_s`` is then the runs' seconds added up.
    """
    headline = tally.headline()
    adm, counts, outcomes = tally.admissions, tally.counts, tally.outcomes
    attempts = sum(adm.values())
    not_admitted = attempts - adm["admitted"]
    failed = not_admitted - adm["rejected_capacity"]
    turns = counts["turns"]
    limits = tally.advertised_limits
    advertised = max(limits, key=lambda k: limits[k]) if limits else None
    send_lag = headline.get("send_lag_ms")
    lag_p99 = send_lag.percentile(99) if send_lag is not None and send_lag.count else None
    loop_lag = headline.get("loop_lag_ms")
    if runs:
        observed = max(int(r["observed_capacity"]) for r in runs)
        cpu = max(float(r["client_cpu_percent"]) for r in runs)
    else:
        observed = tally.observed_capacity()  # the exact sweep over this run's sessions
        cpu = sum(w.get("cpu_percent", 0.0) for w in workers)  # its processes add up
    # a --ray run's workers name their node; a node that could not pace its own sessions
    # invalidates the run even when the cluster's pooled p99 hides it
    unpaced_nodes = sorted({str(w["node"]) for w in workers if w.get("invalid_pacing")})
    # the appends actually sent: a frame-locked lane cuts them shorter (protocol/cadence.py)
    packet = cadence.packet_ms(
        chunk_ms,
        int(config.get("input_rate") or 16000),
        step_ms=cadence.frame_ms(dict(capabilities or {})),
    ).packet_ms
    invalid = (lag_p99 is not None and lag_p99 > packet) or bool(unpaced_nodes)
    audio_s = sum(sl.audio_s for sl in tally.slicer.slices())
    scalars: dict[str, float | None] = {
        "rejection_rate": _rate(not_admitted, attempts),
        "capacity_rejection_rate": _rate(adm["rejected_capacity"], attempts),
        "failure_rate": _rate(failed, attempts),
        "error_rate": _rate(outcomes["failed"], turns),
        "timeout_rate": _rate(outcomes["no_response"], turns),
        "early_start_rate": _rate(counts["early_start"], turns),
        "barge_in_success_rate": _rate(counts["interruptions_cancelled"], counts["interruptions"]),
        "observed_capacity": float(observed),
        "advertised_limit": None if advertised is None else float(advertised),
        "audio_throughput": audio_s / wall_s if wall_s > 0 else None,
        "underruns": float(counts["underruns"]),
        "violations": float(sum(tally.violations.values())),
        "seq_gaps": float(counts["seq_gaps"]),
        "drops": float(counts["drops"]),
        "unplanned_drops": float(counts["unplanned_drops"]),
        "resumes": float(counts["resumes"]),
        "resume_failures": float(counts["resume_failures"]),
        "client_cpu_percent": cpu,
        **behaviour_rates(counts),
        **continuity.scalars(counts),
        **frames.scalars(counts),
    }
    figures = {
        name: {**hist.to_dict(), "measurement_origin": origin_of(name)}
        for name, hist in sorted(headline.items(), key=lambda kv: _order(kv[0]))
    }
    report: dict[str, Any] = {
        "kind": KIND,
        "version": __version__,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "url": url,
        "embedded_server": dict(embedded) if embedded else None,
        "config": dict(config),
        "seed": config.get("seed"),
        "server": {"capabilities": dict(capabilities or {}), "advertised_limit": advertised},
        "interrupted": interrupted,
        "end_reason": end_reason,
        "wall_s": round(wall_s, 3),
        "admission": {
            "attempts": attempts,
            "by_kind": dict(adm),
            "by_code": dict(tally.codes),
            "not_admitted": not_admitted,
            "failed": failed,
            "causes": dict(tally.causes),
            "cause_examples": dict(tally.cause_examples),
            # opens the run's stop abandoned before any answer: not attempts, not in the rates
            "unfinished": {
                "count": sum(tally.unfinished.values()),
                "causes": dict(tally.unfinished),
                "cause_examples": dict(tally.unfinished_examples),
            },
            "advertised_limit": advertised,
            "advertised_limits_seen": {str(k): v for k, v in limits.items()},
            "observed_capacity": observed,
            "offered": offered_load(config, observed=observed, queued=counts["client_queued"]),
            "rejection_rate": scalars["rejection_rate"],
            "capacity_rejection_rate": scalars["capacity_rejection_rate"],
            "failure_rate": scalars["failure_rate"],
        },
        "sessions": {
            "admitted": counts["sessions_admitted"],
            "closed_cleanly": counts["closed_cleanly"],
            "turns_cut_by_stop": counts["turns_cut"],
            "appends": counts["appends"],
            "appends_skipped_while_dropped": counts["skipped_appends"],
        },
        "turns": {
            "count": turns,
            "per_s": turns / wall_s if wall_s > 0 else None,
            "outcomes": dict(outcomes),
            "early_start": counts["early_start"],
            "underruns": counts["underruns"],
            "tool_calls": counts["tool_calls"],
            "tool_outputs": counts["tool_outputs"],
        },
        "interruptions": {
            "behaviours": dict(tally.behaviours),
            "attempted": counts["interruptions"],
            "cancelled": counts["interruptions_cancelled"],
            "answer_ended_first": counts["unanswered_interruptions"],
            "barge_in_success_rate": scalars["barge_in_success_rate"],
        },
        "resume": {
            "drops": counts["drops"],
            "unplanned_drops": counts["unplanned_drops"],
            "scripted_drops": counts["drops"] - counts["unplanned_drops"],
            "sessions_with_drops": counts["sessions_with_drops"],
            "resumes": counts["resumes"],
            "resume_failures": counts["resume_failures"],
            "outcomes": dict(tally.resume_outcomes),
            "seq_gaps": counts["seq_gaps"],
            "duplicates_dropped": counts["duplicates_dropped"],
            "commits_resent": counts["commits_resent"],
            "turns_lost_at_drop": counts["turns_lost_at_drop"],
        },
        "behaviour": {
            **{
                k.removeprefix("behaviour."): v
                for k, v in counts.items()
                if k.startswith("behaviour.")
            },
            **behaviour_rates(counts),
        },
        "continuity": continuity.section(counts, headline),
        "frames": frames.section(counts),
        "errors": dict(tally.errors),
        "violations": dict(tally.violations),
        "validity": {
            "chunk_ms": chunk_ms,
            "packet_ms": packet,
            "send_lag_p99_ms": lag_p99,
            "send_lag_max_ms": send_lag.max if send_lag is not None else None,
            "loop_lag_p99_ms": loop_lag.percentile(99) if loop_lag is not None else None,
            "loop_lag_max_ms": loop_lag.max if loop_lag is not None else None,
            "client_cpu_percent": round(cpu, 1),
            "invalid_pacing": invalid,
            **({"invalid_pacing_nodes": unpaced_nodes} if unpaced_nodes else {}),
            "note": "send lag p99 above one chunk: latency figures are not trusted"
            if invalid
            else "",
        },
        "scalars": scalars,
        "figures": figures,
        "slices": [sl.to_dict() for sl in tally.slicer.slices()],
        "slicing": tally.slicer.describe(),
        "workers": workers,
        "recorder": tally.encode(),
    }
    nodes = ray_nodes(workers)
    if nodes:  # a --ray run says so: how many nodes, each by its address, the id alongside
        report["cluster"] = {"ran_on": "ray", "node_count": len(nodes), "nodes": nodes}
    if runs:
        report["runs"] = [dict(r) for r in runs]
        report["merge_rules"] = dict(MERGE_RULES)
    if extra:
        report.update(extra)
    return report


#: How a report merged from separate runs states each figure (``duplexctl report A B``).
MERGE_RULES: Final = {
    "histograms": "merged bucket for bucket: percentiles of all the samples",
    "counts": "added (attempts, turns, errors, drops …), and the rates recomputed from them",
    "observed_capacity": "the largest of any one run: peaks of separate runs do not add",
    "client_cpu_percent": "the largest of any one run: separate clients' CPU does not add",
    "wall_s": "the runs' seconds added up; audio_throughput and turns per_s are per run-second",
    "per run": "each run's own observed capacity, client CPU and throughput under 'runs'",
}


def run_summary(source: str, report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The per-run figures a merge keeps (one entry, or the entries of a merged report)."""
    if report.get("runs"):
        return [dict(r) for r in report["runs"]]
    admission = report.get("admission", {})
    return [
        {
            "source": source,
            "wall_s": float(report.get("wall_s", 0.0)),
            "attempts": admission.get("attempts", 0),
            "admitted": admission.get("by_kind", {}).get("admitted", 0),
            "turns": report.get("turns", {}).get("count", 0),
            "observed_capacity": admission.get("observed_capacity", 0),
            "client_cpu_percent": report.get("validity", {}).get("client_cpu_percent", 0.0),
            "audio_throughput": report.get("scalars", {}).get("audio_throughput"),
        }
    ]


def _order(name: str) -> int:
    try:
        return HISTOGRAM_METRICS_IN_ORDER.index(name)
    except ValueError:
        return len(HISTOGRAM_METRICS_IN_ORDER)


def tally_of(report: Mapping[str, Any]) -> RunTally:
    """The exact tally a saved report was built from."""
    return RunTally.decode(report["recorder"])


# -- files --------------------------------------------------------------------------------------


def write_json_atomic(path: Path, doc: Mapping[str, Any], writes: Writes | None = None) -> bool:
    """``doc`` as ``path``, whole or not at all (rundir.write_atomic)."""
    return write_atomic(path, json.dumps(doc, indent=1, default=str), writes)


class _CsvCells:
    """CSV text whose string cells a spreadsheet shows as text (terminal.csv_cell): an error
    code from the server must not run as a formula in whoever opens the file."""

    def __init__(self) -> None:
        self._buffer = io.StringIO()
        self._writer = csv.writer(self._buffer)

    def writerow(self, row: Iterable[Any]) -> None:
        self._writer.writerow([csv_cell(value) for value in row])

    def text(self) -> str:
        return self._buffer.getvalue()


def write_outputs(out: Path, report: Mapping[str, Any], writes: Writes | None = None) -> list[Path]:
    """report.json and the CSV summaries next to it, each whole or not at all (a write that
    fails goes to ``writes``, else raises WriteFailed; after one, nothing is attempted)."""
    write_json_atomic(out / "report.json", report, writes)
    figures = out / "figures.csv"
    w = _CsvCells()
    w.writerow(["metric", "n", "p50", "p90", "p95", "p99", "max", "mean", "min", "p99_low_n"])
    for name, f in report["figures"].items():
        w.writerow(
            [name]
            + [f[k] for k in ("n", "p50", "p90", "p95", "p99", "max", "mean", "min", "p99_low_n")]
        )
    write_atomic(figures, w.text(), writes)
    slices = out / "slices.csv"
    w = _CsvCells()
    w.writerow(
        [
            "index",
            "start_s",
            "end_s",
            "phase",
            "turns",
            "attempts",
            "rejections",
            "rejection_rate",
            "errors",
            "ttfa_p50",
            "ttfa_p95",
            "ttfa_p99",
            "audio_throughput",
        ]
    )
    for sl in report["slices"]:
        ttfa = sl["figures"].get("ttfa_ms", {})
        w.writerow([sl["index"], sl["start_s"], sl["end_s"], sl["phase"], sl["turns"], sl["attempts"], sl["rejections"], sl["rejection_rate"], sl["errors"], ttfa.get("p50"), ttfa.get("p95"), ttfa.get("p99"), sl["audio_throughput"]])  # fmt: skip
    write_atomic(slices, w.text(), writes)
    admission = out / "admission.csv"
    w = _CsvCells()
    w.writerow(["outcome", "code", "count"])
    for key, n in report["admission"]["by_code"].items():
        kind, _, code = key.partition(":")
        w.writerow([kind, code, n])
    w.writerow(["admitted", "", report["admission"]["by_kind"].get("admitted", 0)])
    write_atomic(admission, w.text(), writes)
    return [out / "report.json", figures, slices, admission]


def merge_jsonl(parts: Iterable[Path], target: Path, writes: Writes | None = None) -> None:
    """Append worker JSONL parts to ``target`` (whole lines) and remove them; a part stays
    when its lines could not all be appended (a write that failed goes to ``writes``)."""
    merged = JsonLines(target, writes, append=True)
    try:
        for part in parts:
            if not part.exists():
                continue
            with part.open("rb") as fh:
                for line in fh:
                    if not line.endswith(b"\n") or not merged.write(line):
                        break
                else:
                    part.unlink()
    finally:
        merged.close()


# -- rendering ------------------------------------------------------------------------------------


def lead_lines(report: Mapping[str, Any]) -> list[str]:
    """What a summary says first: that the run was interrupted; where it ran (a ``--ray``
    run: its nodes); a capacity search's answer, what the whole search did, its steps and
    the slot release (the sections after are one step's own, and say so)."""
    lines = []
    if report.get("interrupted"):
        lines.append("interrupted: partial report (every session was closed with session.close)")
    cluster = report.get("cluster")
    if cluster:
        lines.append(f"ran on Ray: {cluster_text(cluster)}")
    sweep = report.get("sweep")
    if sweep:  # the sweep's per-level table comes first (docs/report.md)
        from duplexctl.report.sweep import lines as sweep_lines

        lines.extend(sweep_lines(sweep))
        if sweep.get("figures_from") is not None:
            lines.append(
                f"the level at {sweep['figures_from']} sessions "
                "(every figure below is that level's own):"
            )
    cap = report.get("capacity_search")
    if cap:
        lines.extend(capacity_lines(cap))
        lines.extend(slot_release_lines(report))
        if cap.get("figures_from") is not None:
            lines.append(
                f"the step at {cap['figures_from']} {cap.get('unit', 'sessions')} "
                "(every figure below is that step's own):"
            )
    return lines


def cluster_text(cluster: Mapping[str, Any]) -> str:
    """``2 nodes: 10.0.0.5 (gpu-1), node 3f2a… (2 workers, 40 sessions); …``."""
    count = cluster.get("node_count", len(cluster.get("nodes", [])))
    parts = [
        f"{n['label']} ({n['workers']} worker{'s' if n['workers'] != 1 else ''}, "
        f"{n['sessions_started']} sessions{', LOST' if n.get('lost') else ''})"
        for n in cluster.get("nodes", [])
    ]
    return f"{count} node{'s' if count != 1 else ''}: " + "; ".join(parts)


def summary_lines(report: Mapping[str, Any], *, lead: bool = True) -> list[str]:
    """The plain-text final summary (also printed under the rich table); ``lead=False``
    leaves out :func:`lead_lines` (printed before the figures' table)."""
    a, t, v = report["admission"], report["turns"], report["validity"]
    lines = lead_lines(report) if lead else []
    cap = report.get("capacity_search")
    by_kind = ", ".join(f"{k} {n}" for k, n in sorted(a["by_kind"].items())) or "none"
    runs = report.get("runs") or []
    offered = a.get("offered") or {}
    if offered.get("text") and not cap:
        queued = offered.get("queued_on_client") or 0
        lines.append(
            f"offered: {offered['text']}"
            + (
                f"; {queued} arrivals queued on the client for a slot"
                if offered.get("client_limit")
                else ""
            )
        )
    peak = f"{a['observed_capacity']}" + (f" (largest of {len(runs)} runs)" if runs else "")
    if offered.get("observed_is_offered"):
        peak += (
            f" = the client's limit (--max-concurrency {offered['client_limit']}), not the server's"
            if offered.get("client_limit")
            else f" = every session offered (the server held them all: its capacity is at least {peak})"
        )
    lines.append(
        f"sessions: {a['attempts']} attempts ({by_kind}); observed capacity {peak}; "
        f"advertised limit {a['advertised_limit'] if a['advertised_limit'] is not None else '–'}"
    )
    for i, run in enumerate(runs, 1):
        lines.append(
            f"  run {i} ({run['source']}): {run['attempts']} attempts, {run['turns']} turns in "
            f"{format_value(run['wall_s'])} s; observed capacity {run['observed_capacity']}, "
            f"client CPU {format_value(run['client_cpu_percent'])}%, audio throughput "
            f"{format_value(run['audio_throughput'])}"
        )
    lines.extend(admission_lines(a))
    empty = measured_nothing(report)
    lines.append(
        f"turns: {t['count']} ({', '.join(f'{k} {n}' for k, n in sorted(t['outcomes'].items())) or 'none'})"
        + (f" — {empty}" if empty else "")
    )
    if t.get("tool_calls"):  # docs/metrics.md "Tool calls"
        lines.append(
            f"tool calls: {t['tool_calls']}, answered {t.get('tool_outputs', 0)} "
            "(function_call_output, one per call)"
        )
    lines.append(drops_line(report))
    figs = report["figures"]
    for name in (
        "ttfa_ms",
        "turn_ms",
        "time_to_reject_ms",
        "cancel_ack_ms",
        "stop_latency_ms",
        "tool_call_ms",
        "task_ms",
    ):
        if name in figs and figs[name]["n"]:
            f = figs[name]
            p99 = format_value(f["p99"]) + ("*" if f["p99_low_n"] else "")
            lines.append(
                f"{name}: p50 {format_value(f['p50'])} · p95 {format_value(f['p95'])} · "
                f"p99 {p99} (n={f['n']})"
            )
    lines.extend(behaviour_lines(report.get("behaviour") or {}))
    lines.extend(continuity.lines(report.get("continuity") or {}, server_audio(report)))
    lines.extend(frames.lines(report.get("frames")))
    if report.get("errors"):
        lines.append("errors: " + ", ".join(f"{k} {n}" for k, n in report["errors"].items()))
    if report.get("violations"):
        lines.append(
            "violations: " + ", ".join(f"{k} {n}" for k, n in report["violations"].items())
        )
    lag = v["send_lag_p99_ms"]
    packet = v.get("packet_ms", v["chunk_ms"])
    sent = f"chunk {v['chunk_ms']} ms" + (
        f", sent as {packet} ms packets" if packet != v["chunk_ms"] else ""
    )
    lines.append(
        f"client: send lag p99 {format_value(lag)} ms ({sent}), loop lag max "
        f"{format_value(v['loop_lag_max_ms'])} ms, CPU {v['client_cpu_percent']}%"
    )
    if v["invalid_pacing"]:
        lines.append(
            "invalid_pacing: the client's send lag p99 exceeded one chunk — "
            "the latency figures above are not trusted"
        )
    slicing = report.get("slicing") or {}  # absent from reports before slices were capped
    if slicing.get("note"):
        lines.append(f"time slices: {slicing['note']}")
    if not cap:
        lines.extend(slot_release_lines(report))
    lines.extend(environment_lines(report.get("environment")))
    stepped = cap or report.get("sweep")
    at = f" at {stepped['figures_from']} {stepped.get('unit', 'sessions')}" if stepped else ""
    for res in report.get("slo", []):
        verdict = "PASS" if res["passed"] else "FAIL"
        actual = "no samples" if res["actual"] is None else format_value(res["actual"])
        lines.append(
            f"SLO {verdict} {res['expr']}{at}: {actual}"
            + (f" (n={res['n']})" if res.get("n") else "")
        )
    return lines


def server_audio(report: Mapping[str, Any]) -> dict[str, Any] | None:
    """The server's own continuity figures over the same window as the report's own
    sections: the whole run, or — a sweep, a capacity search — the step whose figures they
    are (``server_metrics.steps``, by level)."""
    section = report.get("server_metrics") or {}
    stepped = report.get("sweep") or report.get("capacity_search")
    if not stepped:
        return section.get("audio")
    label = str(stepped.get("figures_from"))
    step = next((st for st in section.get("steps", []) if str(st.get("label")) == label), None)
    return None if step is None else step.get("audio")


def environment_lines(env: Mapping[str, Any] | None) -> list[str]:
    """The pinned environment in two lines (docs/report.md): the client and its host, the
    server's identity; each part that could not be had says why."""
    if not env:
        return []
    c, start, end = env.get("client") or {}, env.get("host_at_start") or {}, env.get("host_at_end")
    load = start.get("load_avg")
    line = (
        f"environment: duplexctl {c.get('duplexctl', '?')} (Python {c.get('python', '?')}), "
        f"host {start.get('cpu_count', '?')} CPUs, load average "
        + ("not available" if load is None else f"{load[0]:g}")
    )
    if end and end.get("load_avg") is not None and load is not None:
        line += f" at the start, {end['load_avg'][0]:g} at the end"
    out = [line]
    server = env.get("server") or {}
    models = server.get("models") or {}
    if "answer" in models:
        data = (models["answer"] or {}).get("data") if isinstance(models["answer"], dict) else None
        ids = ", ".join(
            f"{m.get('id')}"
            + (f" (max_model_len {m['max_model_len']})" if m.get("max_model_len") else "")
            for m in (data or [])
            if isinstance(m, Mapping)
        )
        text = f"server: /v1/models {ids or 'answered no model'}"
    else:
        text = f"server: /v1/models not answered ({models.get('error', 'not asked')})"
    info = server.get("info_metrics") or {}
    families = info.get("families") or []
    if families:
        text += "; " + ", ".join(
            f"{f['name']}{{{','.join(f'{k}={v}' for k, v in sorted(f['labels'].items()))}}}"
            for f in families
        )
    elif info:
        text += f"; info metrics: none ({info.get('note') or 'none exposed'})"
    out.append(text)
    return out


def slot_release_lines(report: Mapping[str, Any]) -> list[str]:
    """How long a full server took to admit again after a clean close and after a drop
    (``--measure-slot-release``, and after a capacity search), or why it was not measured."""
    sr = report.get("slot_release")
    if not sr:
        return []
    lines = []
    for how in ("clean_close", "abrupt_drop"):
        entry = sr.get(how)
        if not isinstance(entry, Mapping):
            continue
        value = entry.get("slot_release_ms")
        lines.append(
            f"slot release after {how.replace('_', ' ')}: {format_value(value)} ms"
            + (f" ({entry['note']})" if entry.get("note") else "")
        )
    why = sr.get("skipped") or sr.get("note") or sr.get("error")
    if why:
        lines.append(f"slot release: {'stopped' if lines else 'not measured'} ({why})")
    return lines


def measured_nothing(report: Mapping[str, Any]) -> str | None:
    """The one line of a run whose sessions were admitted but completed no turn (nothing
    was measured: every latency figure is empty), with how long a turn of its inputs takes
    (``first_turn``, estimated before the run); None when a turn completed, no session was
    admitted (its own line says why), or for a capacity search (each step says it)."""
    if report.get("capacity_search") or report.get("sweep") or report.get("turns", {}).get("count"):
        return None
    if not report.get("admission", {}).get("by_kind", {}).get("admitted"):
        return None
    asked = (report.get("config") or {}).get("duration_s")
    span = f"--duration {asked:g} s" if asked else f"{format_value(report.get('wall_s'))} s"
    line = f"measured nothing: no turn completed in {span}"
    turn = report.get("first_turn") or {}
    if turn.get("seconds"):
        longer = math.ceil(2 * float(turn["seconds"]))
        line += (
            f"; one turn of these inputs takes about {float(turn['seconds']):.1f} s "
            f"({turn['estimate']}): run for {longer} s or more (--duration {longer}s)"
        )
    return line


def behaviour_lines(b: Mapping[str, Any]) -> list[str]:
    """How the conversations behaved, with each rate's n (docs/metrics.md)."""
    if not b.get("pause_trials") and not b.get("turn_ends"):
        return []
    bits = []
    if b.get("pause_trials"):
        bits.append(f"takeover {_percent(b['takeover_rate'])} (n={b['pause_trials']} pauses)")
    if b.get("turn_ends"):
        bits.append(f"unanswered turn ends {_percent(b['no_response_rate'])} (n={b['turn_ends']})")
    per_min = b.get("backchannels_per_min")
    bits.append(f"backchannels {format_value(per_min)}/min of user speech")
    return ["behaviour: " + ", ".join(bits)]


def drops_line(report: Mapping[str, Any]) -> str:
    """Connection drops and resumes, always shown: resumes hide a broken server otherwise."""
    r = report.get("resume", {})
    if not r.get("drops"):
        return "connection drops: none"
    line = (
        f"connection drops: {r['drops']} (unplanned {r['unplanned_drops']}, scripted "
        f"{r['scripted_drops']}) in {r['sessions_with_drops']} sessions; resumed "
        f"{r['resumes']}, failed {r['resume_failures']}"
    )
    f = report["figures"].get("resume_ms")
    if f and f["n"]:
        line += f"; resume_ms {_pct_line(f)}"
    if r.get("commits_resent") or r.get("turns_lost_at_drop"):
        line += (
            f"; commits the server never received: {r.get('commits_resent', 0)} sent again, "
            f"{r.get('turns_lost_at_drop', 0)} turns lost at the drop"
        )
    return line


def _percent(rate: float | None) -> str:
    return f"{format_value(rate * 100 if rate is not None else None)}%"


def cause_counts(causes: Mapping[str, int]) -> str:
    """``refused 7, tls 2``: causes with their counts, the most frequent first."""
    return ", ".join(f"{c} {n}" for c, n in sorted(causes.items(), key=lambda kv: -kv[1]))


def admission_lines(a: Mapping[str, Any]) -> list[str]:
    """Why attempts were not admitted (each cause with one message) and the three rates."""
    lines = []
    causes = a.get("causes") or {}
    if a.get("not_admitted"):
        counted = cause_counts(causes)
        lines.append(f"not admitted: {a['not_admitted']} of {a['attempts']} attempts: {counted}")
        for cause, example in sorted((a.get("cause_examples") or {}).items()):
            lines.append(f"  {cause}: {example}")
    unfinished = a.get("unfinished") or {}
    if unfinished.get("count"):
        lines.append(
            f"still opening when the run stopped: {unfinished['count']} "
            f"({cause_counts(unfinished['causes'])}); "
            "not counted as attempts"
        )
    coded = {k: n for k, n in a["by_code"].items() if not k.endswith(":-")}
    if coded:
        lines.append("rejections: " + ", ".join(f"{k} {n}" for k, n in coded.items()))
    lines.append(
        f"rejection rate {_percent(a['rejection_rate'])} (capacity "
        f"{_percent(a.get('capacity_rejection_rate'))}, failed {_percent(a.get('failure_rate'))})"
    )
    return lines


def capacity_lines(cap: Mapping[str, Any]) -> list[str]:
    """A capacity search: its answer, what the whole search did, each step's verdict."""
    unit = cap.get("unit", "sessions")
    if cap.get("answer"):
        lines = [f"capacity: {cap['answer']}"]
    else:  # a report written before the answer line
        lines = [
            f"capacity: largest {unit} meeting every SLO: {cap.get('largest_pass') or 'none'}; "
            f"first failure at {cap.get('first_fail') or 'none'}"
            + (f" ({cap['fail_reason']})" if cap.get("fail_reason") else "")
        ]
    totals = cap.get("totals")
    if totals:
        by_kind = ", ".join(f"{k} {n}" for k, n in sorted(totals["by_kind"].items())) or "none"
        steps = len(cap.get("steps", []))
        lines.append(
            f"capacity search: {format_value(totals['wall_s'])} s, {steps} steps"
            + (
                f" ({totals['runs']} runs: steps run again to be judged)"
                if totals["runs"] > steps
                else ""
            )
            + f", {totals['attempts']} attempts ({by_kind}), {totals['turns']} turns"
        )
        if totals.get("causes"):
            lines.append(
                f"capacity search: not admitted by cause: {cause_counts(totals['causes'])}"
            )
    if cap.get("rejections_began_at") is not None:
        lines.append(f"capacity: rejections began at {cap['rejections_began_at']} {unit}")
    for step in cap.get("steps", []):
        lines.append(
            f"  step {step['level']:>4} {unit}: {'pass' if step['passed'] else 'FAIL'}"
            + (f" — {step['reason']}" if step.get("reason") else "")
            + (
                f" (ttfa p95 {format_value(step.get('ttfa_p95'))} ms, rejection rate {format_value(step.get('rejection_rate'))})"
            )
        )
    return lines


def render_final(report: Mapping[str, Any], *, rich_table: bool, out: TextIO | None = None) -> None:
    """Print the final report: a rich table on a terminal, plain lines otherwise."""
    import sys

    stream = out or sys.stdout
    for line in lead_lines(report):
        print(line, file=stream)
    if rich_table:
        from duplexctl.terminal import console as make_console

        console = make_console(stream)
        hs = tally_of(report).headline()
        console.print(
            histogram_table(
                hs, metrics=list(report["figures"]), title="load: figures after warm-up"
            )
        )
    else:
        for name, f in report["figures"].items():
            if f["n"]:
                print(f"{name}: {_pct_line(f)}", file=stream)
    for line in summary_lines(report, lead=False):
        print(line, file=stream)
    if report.get("server_metrics") or report.get("server_metrics_by_run"):
        from duplexctl.prometheus.summary import render_lines

        sections = [("", report["server_metrics"])] if report.get("server_metrics") else []
        sections += [(f"{s['source']}: ", s) for s in report.get("server_metrics_by_run", [])]
        for prefix, section in sections:
            for line in render_lines(section):
                print(prefix + line if line.startswith("server metrics") else line, file=stream)


def _pct_line(f: Mapping[str, Any]) -> str:
    p99 = format_value(f["p99"]) + ("*" if f["p99_low_n"] else "")
    return f"p50 {format_value(f['p50'])} · p95 {format_value(f['p95'])} · p99 {p99} · max {format_value(f['max'])} (n={f['n']})"
