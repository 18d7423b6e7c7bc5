"""Showing a replay report: a rich table on a terminal, plain lines otherwise, or JSON.

Works from the report *dict* (the same document ``report.json`` holds), so ``duplexctl
report`` can re-render a saved run identically. Plain lines are ``key=value`` pairs, one turn
per line, for logs and grep; the table is for people. Which figures appear depends on the
turn: barge-in and resume columns only when some turn has them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from duplexctl.behaviour.figures import summary_line
from duplexctl.report import frames
from duplexctl.terminal import json_text

# (column title, figure or field, format) in display order
_BASE_COLUMNS: list[tuple[str, str]] = [
    ("ttfa_ms", "ttfa_ms"),
    ("ttft_ms", "ttft_ms"),
    ("turn_ms", "turn_ms"),
    ("rtf", "rtf"),
    ("audio_ms", "audio_ms"),
]
_BARGE_COLUMNS: list[tuple[str, str]] = [
    ("cancel_ack_ms", "cancel_ack_ms"),
    ("model_stop_ms", "model_stop_ms"),
    ("audio_stop_ms", "audio_stop_ms"),
    ("heard_stop_ms", "heard_stop_ms"),
    ("leaked_ms", "leaked_audio_ms"),
    ("post_int_ttfa", "post_interrupt_ttfa_ms"),
]
_TOOL_COLUMNS: list[tuple[str, str]] = [
    ("tool_calls", "tool_calls"),
    ("tool_call_ms", "tool_call_ms"),
    ("tool_text_ms", "tool_answer_text_ms"),
    ("tool_audio_ms", "tool_answer_audio_ms"),
    ("task_ms", "task_ms"),
]
_RESUME_COLUMNS: list[tuple[str, str]] = [
    ("drops", "drops"),
    ("resume_ms", "resume_ms"),
    ("replayed", "replayed_events"),
    ("dups", "duplicates_dropped"),
    ("gaps", "seq_gaps"),
]
_CAPABILITY_FLAGS: list[tuple[str, str]] = [
    ("supports_session_resume", "resume"),
    ("supports_barge_in", "barge_in"),
    ("supports_audio_truncate", "truncate"),
    ("supports_playback_ack", "playback_ack"),
    ("supports_client_commit", "client_commit"),
    ("supports_text_only_turn", "text_turn"),
]


def fig(turn: dict[str, Any], name: str) -> Any:
    """A figure's value from a turn's JSON (None when it does not apply)."""
    entry = turn.get("figures", {}).get(name)
    if entry is None:
        return None
    value = entry.get("value")
    if isinstance(value, dict):
        return value.get("max")
    return value


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if abs(value) < 10 and value != int(value):
            return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
        return f"{value:.0f}"
    return str(value)


def capabilities_line(caps: dict[str, Any]) -> str:
    """The server's capabilities in one compact line."""
    if not caps:
        return "capabilities: (none announced)"
    parts = []
    if caps.get("implementation_level"):
        parts.append(str(caps["implementation_level"]))
    flags = [short for key, short in _CAPABILITY_FLAGS if caps.get(key) is True]
    missing = [short for key, short in _CAPABILITY_FLAGS if caps.get(key) is False]
    if flags:
        parts.append("+" + " +".join(flags))
    if missing:
        parts.append("-" + " -".join(missing))
    for key in ("chunk_period_ms", "target_barge_in_latency_ms", "session_admission_mode"):
        if caps.get(key) is not None:
            parts.append(f"{key}={caps[key]}")
    return "capabilities: " + " ".join(parts)


def _columns(turns: list[dict[str, Any]]) -> list[tuple[str, str]]:
    cols = list(_BASE_COLUMNS)
    if any(
        fig(t, "cancel_ack_ms") is not None or fig(t, "audio_stop_ms") is not None for t in turns
    ):
        cols += _BARGE_COLUMNS
    if any(fig(t, "tool_calls") for t in turns):
        cols += _TOOL_COLUMNS
    if any(fig(t, "drops") or fig(t, "resume_ms") is not None for t in turns):
        cols += _RESUME_COLUMNS
    return cols


def _session_line(report: dict[str, Any]) -> str:
    sess = report.get("session", {})
    figs = report.get("session_figures", {})
    bits = [f"session {sess.get('id') or '-'}"]
    for name in ("connect_ms", "handshake_ms", "close_ms"):
        value = figs.get(name, {}).get("value")
        if value is not None:
            bits.append(f"{name}={_fmt(value)}")
    return " ".join(bits)


def _violation_lines(report: dict[str, Any]) -> list[str]:
    counts: dict[str, int] = report.get("violation_counts", {})
    if not counts:
        return ["violations: none"]
    return ["violations: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))] + [
        f"  {v.get('name')}: {v.get('detail')}" for v in report.get("violations", [])[:20]
    ]


def _connection_lines(report: dict[str, Any]) -> list[str]:
    """Drops and resumes, so a server that drops every connection never looks healthy."""
    conn = report.get("connection")
    if conn is None:  # a report from before drops were recorded
        return []
    drops = conn.get("drops", 0)
    if not drops:
        return ["connection: no drops"]
    scripted = conn.get("scripted_drops", 0)
    bits = [f"connection: {drops} drop{'s' if drops != 1 else ''}"]
    if scripted:
        bits[0] += f" ({scripted} scripted)"
    bits.append(f"{conn.get('resumes', 0)} resumed")
    if conn.get("resume_failures"):
        bits.append(f"{conn['resume_failures']} resume failed")
    resume_ms = conn.get("resume_ms") or []
    if resume_ms:
        bits.append(f"resume_ms max {_fmt(max(resume_ms))}")
    if conn.get("commits_resent"):
        bits.append(f"{conn['commits_resent']} commit(s) the server never received sent again")
    lost = conn.get("turns_lost_at_drop") or []
    if lost:
        bits.append(f"turn(s) {', '.join(map(str, lost))} lost at the drop")
    return [", ".join(bits)]


def _behaviour_lines(report: dict[str, Any]) -> list[str]:
    """How the conversation behaved (docs/metrics.md "Conversation behaviour"), and the
    model's backchannel responses, which are no user turns and listed apart."""
    behaviour = report.get("behaviour")
    lines = [summary_line(behaviour)] if behaviour else []
    for name, note in ((behaviour or {}).get("notes") or {}).items():
        lines.append(f"  {name}: {note}")
    backchannels = report.get("backchannel_responses") or []
    if backchannels:
        audio = ", ".join(f"{_fmt(b.get('audio_ms'))} ms" for b in backchannels[:10])
        lines.append(
            f"backchannel responses (the model's, not user turns): {len(backchannels)} ({audio})"
        )
    return lines


def _unanswered_lines(report: dict[str, Any]) -> list[str]:
    """Turns that got no answer in time: errors, never silence (issue 16.1)."""
    lost = [e for e in report.get("errors", []) if e.get("code") in ("no_response", "lost_at_drop")]
    if not lost:
        return []
    return [f"errors: {len(lost)} turn(s) without an answer"] + [
        f"  {e.get('message')}" for e in lost[:20]
    ]


def _expectation_lines(report: dict[str, Any]) -> list[str]:
    exp = report.get("expectations", {})
    failed = exp.get("failed", [])
    checked = exp.get("checked", 0)
    not_reached = exp.get("not_reached", [])
    lines = []
    if checked:
        if not failed:
            lines.append(f"expectations: {checked} checked, all held")
        else:
            lines.append(f"expectations: {len(failed)} of {checked} failed")
    for f in failed:
        where = "run" if f.get("step") is None else f"step {f['step']}"
        if f.get("turn") is not None:
            where += f" turn {f['turn']}"
        lines.append(f"  {where}: {f['name']} = {_fmt(f['actual'])}, expected {f['expected']}")
    if not_reached:
        steps = sorted({n["step"] for n in not_reached if n.get("step") is not None})
        where = f" (steps {', '.join(map(str, steps))})" if steps else ""
        lines.append(f"expectations: {len(not_reached)} not reached{where}: the run stopped first")
    return lines


def _stopped_lines(report: dict[str, Any]) -> list[str]:
    """A run that did not end by itself says so (its figures are partial)."""
    status = report.get("status")
    if status == "interrupted":
        return ["interrupted: partial results"]
    if status == "write_failed":
        return ["stopped: a file of --out could not be written: partial results"]
    return []


def plain_lines(report: dict[str, Any]) -> list[str]:
    """The report as plain ``key=value`` lines (not a terminal, or ``report`` re-render)."""
    lines = [capabilities_line(report.get("session", {}).get("capabilities", {}))]
    lines.append(_session_line(report))
    turns = report.get("turns", [])
    cols = _columns(turns)
    for t in turns:
        bits = [
            f"turn {t['index']}",
            f"source={t.get('source') or '-'}",
            f"outcome={t.get('outcome')}",
            f"reason={t.get('reason') or '-'}",
        ]
        bits += [f"{title}={_fmt(fig(t, name))}" for title, name in cols]
        lines.append(" ".join(bits))
    lines += _connection_lines(report)
    lines += frames.session_lines(report.get("frames"))
    lines += _behaviour_lines(report)
    lines += _unanswered_lines(report)
    lines += _violation_lines(report)
    lines += _expectation_lines(report)
    lines += _stopped_lines(report)
    return lines


def render_plain(report: dict[str, Any], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for line in plain_lines(report):
        print(line, file=out)


def render_table(
    report: dict[str, Any], out: TextIO | None = None, *, width: int | None = None
) -> None:
    """The report as a rich table plus summary lines (on a terminal)."""
    from rich.table import Table
    from rich.text import Text

    from duplexctl.terminal import console as make_console

    console = make_console(out, width=width)
    console.print(capabilities_line(report.get("session", {}).get("capabilities", {})))
    console.print(_session_line(report))
    turns = report.get("turns", [])
    cols = _columns(turns)
    table = Table(title=f"replay {report.get('scenario', {}).get('name', '')}".strip())
    for title in ["#", "source", "outcome", "reason"] + [c[0] for c in cols]:
        table.add_column(
            title, justify="left" if title in ("source", "outcome", "reason") else "right"
        )
    for t in turns:
        outcome = str(t.get("outcome"))
        style = {"spoke": "green", "cancelled": "yellow", "failed": "red", "no_response": "red"}
        table.add_row(
            str(t["index"]),
            str(t.get("source") or "-"),
            Text(outcome, style=style.get(outcome, "white")),
            str(t.get("reason") or "-"),
            *[_fmt(fig(t, name)) for _, name in cols],
        )
    console.print(table)
    summary = _connection_lines(report) + frames.session_lines(report.get("frames"))
    summary += _behaviour_lines(report) + _unanswered_lines(report)
    for line in summary + _violation_lines(report) + _expectation_lines(report):
        console.print(line, highlight=False)
    for line in _stopped_lines(report):
        console.print(line)


def render_json(report: dict[str, Any], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json_text(report, indent=2) + "\n")
    out.flush()


def render(report: dict[str, Any], *, as_json: bool, out: TextIO | None = None) -> None:
    """Pick the form: JSON when asked, a table on a terminal, plain lines otherwise."""
    out = out or sys.stdout
    if as_json:
        render_json(report, out)
    elif out.isatty():
        render_table(report, out)
    else:
        render_plain(report, out)


def turn_progress_line(turn: dict[str, Any]) -> str:
    """One line for a finished turn while the run goes on (stderr progress)."""
    bits = [f"turn {turn['index']}: {turn.get('outcome')}"]
    if turn.get("reason"):
        bits.append(f"({turn['reason']})")
    for name in ("ttfa_ms", "cancel_ack_ms", "model_stop_ms", "tool_call_ms", "drops", "resume_ms"):
        value = fig(turn, name)
        if value is not None:
            bits.append(f"{name}={_fmt(value)}")
    return " ".join(bits)


def joined(lines: Iterable[str]) -> str:
    return "\n".join(lines)
