"""A replay run's report (the document report.json holds), its expectations, its exit code.

Exit code (docs/architecture.md): 4 when a file of ``--out`` could not be written (the run
stopped there, issue 31.2); 130 when interrupted; 1 when an expectation failed, the
protocol checker saw a violation, a problem stopped the run, or a turn went unanswered (no
silent turns, issue 16.1); else 0.

Expectations are judged once the run is over: each step's against the turn it concerns,
the scenario's top-level ``[expect]`` against the run-wide figures
(:data:`~duplexctl.report.turns.RUN_ORIGINS`: drops, resumes, …, issue 17.4). A step the
run never finished (Ctrl-C, the session ended) cannot be judged: its expectations are
listed as ``not_reached``, never as failures (issue 17.6).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duplexctl import __version__
from duplexctl.audio import manifest
from duplexctl.audio.pacer import Pacer
from duplexctl.behaviour import fdb
from duplexctl.behaviour.figures import ORIGINS as BEHAVIOUR_ORIGINS
from duplexctl.behaviour.figures import Figures, ScriptedEvents, conversation_figures
from duplexctl.behaviour.timeline import ASSISTANT, USER
from duplexctl.errors import WriteFailed
from duplexctl.protocol.commits import LOST_AT_DROP
from duplexctl.protocol.settings import BACKCHANNEL
from duplexctl.report.turns import RUN_ORIGINS, Figure, TurnRecord
from duplexctl.scenario.assembly import NO_RESPONSE, TurnAssembly
from duplexctl.scenario.model import Pace
from duplexctl.scenario.state import RunState
from duplexctl.scenario.tools import UNANSWERED_CALL


@dataclass(slots=True)
class ReplayResult:
    """What a run produced; ``exit_code`` follows the module docstring."""

    report: dict[str, Any]
    records: list[TurnRecord]
    failed_expectations: list[dict[str, Any]]
    violations: int
    interrupted: bool
    problems: list[str]
    unanswered_turns: int = 0  # no_response and lost at the drop: turns without an answer
    unanswered_tool_calls: int = 0
    write_failure: WriteFailed | None = None  # --out could not be written: the run stopped

    @property
    def exit_code(self) -> int:
        if self.write_failure is not None:
            return self.write_failure.exit_code
        if self.interrupted:
            return 130
        return 1 if self.failure_reasons() else 0

    def failure_reasons(self) -> list[str]:
        """Why the run failed, in a few words each (empty: it did not). The one list the
        exit code and the ``check failed`` line both read, so that line is never empty."""
        reasons = []
        if self.failed_expectations:
            reasons.append(f"{len(self.failed_expectations)} expectation(s) failed")
        if self.violations:
            reasons.append(f"{self.violations} protocol violation(s)")
        if self.unanswered_turns:
            reasons.append(f"{self.unanswered_turns} turn(s) without an answer")
        if self.unanswered_tool_calls:
            reasons.append(f"{self.unanswered_tool_calls} tool call(s) nothing answered")
        return reasons + self.problems


def connection_summary(run: RunState) -> dict[str, Any]:
    """Every drop of the run and how its resume went (report.json ``connection``)."""
    resumes = [r.times for _, r in run.resumes]
    resume_ms = [
        round((t.t_resumed - t.t_drop) / 1e6, 3) for t in resumes if t.t_resumed is not None
    ]
    commits = run.commits
    lost = [e.get("turn") for e in run.errors if e.get("code") == LOST_AT_DROP]
    return {
        # commits the server's resume showed it never received (protocol/commits.py)
        "commits_resent": commits.resent_count if commits is not None else 0,
        "turns_lost_at_drop": lost,
        "drops": len(resumes),
        "scripted_drops": sum(not t.automatic for t in resumes),
        "resumes": sum(t.outcome == "resumed" for t in resumes),
        "resume_failures": sum(t.outcome not in ("resumed", "pending") for t in resumes),
        "resume_ms": resume_ms,
        "drops_detail": [
            {
                "turn": turn.index if turn is not None else None,
                "automatic": r.times.automatic,
                "t_ms": run.t_ms(r.times.t_drop),
                "outcome": r.times.outcome,
                "resume_ms": round((r.times.t_resumed - r.times.t_drop) / 1e6, 3)
                if r.times.t_resumed is not None
                else None,
            }
            for turn, r in run.resumes
        ],
    }


def _value(figure: Figure | None) -> Any:
    return None if figure is None else figure.value


def run_figures(report: dict[str, Any]) -> dict[str, float]:
    """The run-wide figures a top-level ``[expect]`` may bound, from a report."""
    conn = report.get("connection", {})
    return {
        "drops": conn.get("drops", 0),
        "resumes": conn.get("resumes", 0),
        "resume_failures": conn.get("resume_failures", 0),
        "resume_ms": max(conn.get("resume_ms") or [0.0]),
        "unanswered_turns": report.get("unanswered_turns", 0),
        **{k: v for k, v in report.get("behaviour", {}).items() if k in BEHAVIOUR_ORIGINS},
    }


def scripted_events(run: RunState) -> ScriptedEvents:
    """Where the script put pauses, turn ends and interruptions on the behaviour timeline."""
    off = run.user_offset_ms or 0.0
    interrupting = [
        t for t in run.turns if t.interrupts is not None and t.speech_start_u is not None
    ]
    return ScriptedEvents(
        pauses=[(off + p0, off + p1) for p0, p1 in run.pauses_u],
        turn_starts=[off + t.speech_start_u for t in run.turns if t.speech_start_u is not None],
        turn_ends=[off + t.speech_end_u for t in run.turns if t.speech_end_u is not None],
        interruptions=[off + (t.speech_start_u or 0.0) for t in interrupting],
        interruption_ends=[off + (t.speech_end_u or 0.0) for t in interrupting],
        interruption_texts=[
            (spoken_text(t.interrupts.times.source), spoken_text(t.times.source))
            for t in interrupting
            if t.interrupts is not None
        ],
    )


def spoken_text(source: str | None) -> str:
    """What a bundled recording says (its manifest), else nothing known."""
    bundled = manifest.bundled()
    entry = bundled.get(source) if source and bundled is not None else None
    return entry.text if entry is not None else ""


def behaviour_figures(run: RunState) -> Figures:
    """The conversation's behaviour figures, from the run's timeline and what the script
    placed on it (docs/metrics.md "Conversation behaviour")."""
    timeline = run.timeline
    assert timeline is not None
    events = dataclasses.replace(scripted_events(run), end_ms=timeline.length_ms())
    return conversation_figures(timeline.segments(USER), timeline.segments(ASSISTANT), events)


class ReplayReport:
    """Builds the report of one run from its parts (see the module docstring)."""

    def __init__(self, run: RunState, assembly: TurnAssembly, pacer: Pacer) -> None:
        self.run = run
        self.assembly = assembly
        self.pacer = pacer

    def expectations(
        self, records: dict[int, TurnRecord]
    ) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
        """(checked, failed, not reached) of every step's expectations."""
        run = self.run
        checked, failed, not_reached = 0, [], []
        for step in run.scenario.steps:
            if not step.expect:
                continue
            if step.index not in run.step_turn and not run.completed:
                not_reached += [
                    {"step": step.index, "name": exp.name, "expected": exp.source}
                    for exp in step.expect
                ]
                continue
            turn = run.step_turn.get(step.index)
            record = records.get(turn.index) if turn is not None else None
            for exp in step.expect:
                checked += 1
                actual = record.value(exp.name) if record is not None else None
                ok = record is not None and exp.holds(actual)
                entry = {
                    "step": step.index,
                    "turn": turn.index if turn is not None else None,
                    "name": exp.name,
                    "expected": exp.source,
                    "actual": actual,
                    "ok": ok,
                }
                if record is not None:
                    record.expectations.append(entry)
                if not ok:
                    failed.append(entry)
        return checked, failed, not_reached

    def _run_expectations(self, report: dict[str, Any]) -> list[dict[str, Any]]:
        """The scenario's top-level ``[expect]`` against the run-wide figures: every one
        judged, held or not (the report keeps them all, so a page shows what held too)."""
        figures = run_figures(report)
        return [
            {
                "step": None,
                "turn": None,
                "name": exp.name,
                "expected": exp.source,
                "actual": figures.get(exp.name),
                "ok": exp.holds(figures.get(exp.name)),
            }
            for exp in self.run.scenario.expect
        ]

    def export_full_duplex_bench(self, out_dir: Path) -> None:
        """``--out``'s conversation as Full-Duplex-Bench samples (behaviour/fdb.py)."""
        timeline = self.run.timeline
        assert timeline is not None
        fdb.export(
            out_dir / "conversation.wav",
            out_dir,
            timeline.segments(USER),
            timeline.segments(ASSISTANT),
            scripted_events(self.run),
        )

    def build(self) -> dict[str, Any]:
        run = self.run
        records = self.assembly.records()
        by_index = {r.index: r for r in records}
        checked, failed, not_reached = self.expectations(by_index)
        conn = run.conn
        cs = conn.session if conn is not None else None
        timings = conn.timings if conn is not None else None
        session_figures: dict[str, Any] = {}
        if timings is not None:
            for name, value, origin in (
                ("connect_ms", timings.connect_ms, "websocket open complete - connect start"),
                (
                    "handshake_ms",
                    timings.handshake_ms,
                    "recv session.created - send session.update",
                ),
                ("close_ms", timings.close_ms, "recv session.closed - send session.close"),
            ):
                if value is not None:
                    session_figures[name] = Figure(round(value, 3), origin).to_json()
        checker = cs.checker if cs is not None else None
        lag = self.pacer.lag
        config = run.config
        report: dict[str, Any] = {
            "duplexctl_version": __version__,
            "command": "replay",
            "status": run.status,
            "url": run.url,
            **run.meta,
            "scenario": {
                "name": run.scenario.name,
                "source": str(run.scenario.source) if run.scenario.source else None,
                "description": run.scenario.description,
                "steps": len(run.scenario.steps),
                "steps_begun": run.steps_begun,
            },
            "config": config.echo(),
            "session": {
                "id": cs.session_id if cs else None,
                "capabilities": cs.capabilities if cs else {},
                "close_reason": cs.close_reason if cs else None,
            },
            # frames in and out on a frame-locked lane (docs/metrics.md "Frame accounting")
            "frames": cs.frames.to_json() if cs is not None and cs.frames is not None else None,
            "session_figures": session_figures,
            "connection": connection_summary(run),
            "turns": [r.to_json() for r in records if r.end_mode != BACKCHANNEL],
            # the model's backchannels ("mm-hm" while the user spoke): responses, no turns
            "backchannel_responses": [
                {"response_id": r.response_id, "audio_ms": _value(r.figures.get("audio_ms"))}
                for r in records
                if r.end_mode == BACKCHANNEL
            ],
            "unanswered_turns": sum(e.get("code") == NO_RESPONSE for e in run.errors),
            "unanswered_tool_calls": sum(e.get("code") == UNANSWERED_CALL for e in run.errors),
            "turns_lost_at_drop": sum(e.get("code") == LOST_AT_DROP for e in run.errors),
            "expectations": {"checked": checked, "failed": failed, "not_reached": not_reached},
            "violations": [v.to_dict() for v in checker.violations] if checker else [],
            "violation_counts": checker.counts() if checker else {},
            "errors": run.errors,
            "problems": run.problems,
            "notes": run.notes,
            "pacing": {
                "chunk_ms": config.chunk_ms,
                "packet_ms": self.pacer.chunk_ms,
                "appends": lag.count,
                "skipped_appends": run.skipped_appends,
                "send_lag_p99_ms": round(lag.percentile(99), 3),
                "send_lag_max_ms": round(lag.max_ms, 3),
                "invalid_pacing": config.pace is Pace.REALTIME
                and lag.count > 0
                and lag.percentile(99) > self.pacer.chunk_ms,
            },
            "measurement_origins": {"connection": RUN_ORIGINS},
        }
        if run.timeline is not None and config.pace is Pace.REALTIME:
            # --pace fast sends faster than it speaks: no conversation timeline to read
            report["behaviour"] = behaviour_figures(run).to_json()
        if run.completed or not run.interrupted:
            judged = self._run_expectations(report)
            report["expectations"]["checked"] += len(judged)
            report["expectations"]["run"] = judged
            failed += [e for e in judged if not e["ok"]]
        else:
            report["expectations"]["not_reached"] += [
                {"step": None, "name": exp.name, "expected": exp.source}
                for exp in run.scenario.expect
            ]
        return report

    def result(self) -> ReplayResult:
        """The final report (resumes' counts completed) and what the CLI needs of it."""
        for _, r in self.run.resumes:
            self.assembly.finish_resume(r)
        report = self.build()
        failed = report["expectations"]["failed"]
        result = ReplayResult(
            report=report,
            records=self.assembly.records(),
            failed_expectations=failed,
            violations=len(report["violations"]),
            interrupted=self.run.interrupted,
            problems=list(self.run.problems),
            unanswered_turns=report["unanswered_turns"] + report["turns_lost_at_drop"],
            unanswered_tool_calls=report["unanswered_tool_calls"],
            write_failure=self.run.writes.failure,
        )
        report["exit_code"] = result.exit_code
        return result
