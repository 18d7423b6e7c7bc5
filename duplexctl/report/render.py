"""Showing a replay report: a rich table on a terminal, plain lines otherwise, or JSON.

Works from the report *dict* (the same document ``report.json`` holds), so ``duplexctl
report`` can re-render a saved run identically. Plain lines are ``key=value`` pairs, one turn
per line, for logs and grep; the table is for people. Which figures appear depends on the
turn: barge-in and resume columns only when some turn has them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any, TextIO

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
    ("audio_stop_ms", "audio_stop_ms"),
    ("heard_stop_ms", "heard_stop_ms"),
    ("leaked_ms", "leaked_audio_ms"),
    ("post_int_ttfa", "post_interrupt_ttfa_ms"),
]
_RESUME_COLUMNS: list[tuple[str, str]] = [
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
    if any(fig(t, "resume_ms") is not None for t in turns):
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


def _expectation_lines(report: dict[str, Any]) -> list[str]:
    failed = report.get("expectations", {}).get("failed", [])
    checked = report.get("expectations", {}).get("checked", 0)
    if not checked:
        return []
    if not failed:
        return [f"expectations: {checked} checked, all held"]
    return [f"expectations: {len(failed)} of {checked} failed"] + [
        f"  step {f['step']} turn {f['turn']}: {f['name']} = {_fmt(f['actual'])}, "
        f"expected {f['expected']}"
        for f in failed
    ]


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
    lines += _violation_lines(report)
    lines += _expectation_lines(report)
    if report.get("status") == "interrupted":
        lines.append("interrupted: partial results")
    return lines


def render_plain(report: dict[str, Any], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for line in plain_lines(report):
        print(line, file=out)


def render_table(
    report: dict[str, Any], out: TextIO | None = None, *, width: int | None = None
) -> None:
    """The report as a rich table plus summary lines (on a terminal)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out or sys.stdout, width=width)
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
            f"[{style.get(outcome, 'white')}]{outcome}[/]",
            str(t.get("reason") or "-"),
            *[_fmt(fig(t, name)) for _, name in cols],
        )
    console.print(table)
    for line in _violation_lines(report) + _expectation_lines(report):
        console.print(line, markup=False, highlight=False)
    if report.get("status") == "interrupted":
        console.print("interrupted: partial results", markup=False)


def render_json(report: dict[str, Any], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(report, indent=2, default=str) + "\n")
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
    for name in ("ttfa_ms", "cancel_ack_ms", "resume_ms"):
        value = fig(turn, name)
        if value is not None:
            bits.append(f"{name}={_fmt(value)}")
    return " ".join(bits)


def joined(lines: Iterable[str]) -> str:
    return "\n".join(lines)
