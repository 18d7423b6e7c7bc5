"""The load run's recorder: every session and turn goes in once, figures come out exactly.

One :class:`Recorder` per process: a :class:`~duplexctl.report.tally.RunTally` (histograms
per time slice and phase window, counts, session intervals — what merges exactly across
workers and runs) that sessions report to as the :class:`~duplexctl.load.session.Sink`, plus
what only a live run has:

* **raw records** written as they happen to ``turns.jsonl`` / ``sessions.jsonl`` (each line
  handed to the kernel whole, so Ctrl-C or a crash keeps every finished turn), and each
  session's behaviour trials to ``behaviour.jsonl`` when its conversation ends (its figures
  are read off the whole conversation, so they exist only then, after its turns' lines were
  written); a write that fails goes to the run's ``writes``, which stops the run
  (duplexctl/rundir.py: the files keep whole lines);
* a small **live window** (last seconds of ttfa and send lag) for the dashboard.

Turn figures come from :func:`duplexctl.report.turns.compute_turn` unchanged; the recorder
only decides which go into histograms: per-turn counters (``underruns``, ``seq_gaps`` …) are
summed instead, and ``chunk_gap_ms`` records every gap (not the per-turn summary).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from duplexctl.behaviour.figures import Figures
from duplexctl.load.session import SessionRecord, Sink
from duplexctl.report import continuity, frames
from duplexctl.report.slices import UNFINISHED, TimeSlicer, Windows
from duplexctl.report.tally import RunTally
from duplexctl.report.turns import TurnRecord, TurnTimes
from duplexctl.rundir import JsonLines, Writes
from duplexctl.units import NS_PER_MS, NS_PER_S

if TYPE_CHECKING:  # a --ray actor's live seconds (load/cluster/seconds.py)
    from duplexctl.export.state import ExportState
    from duplexctl.load.cluster.seconds import SecondTally

#: Per-turn counts: summed over the run, not put into histograms.
SUMMED: Final = frozenset(
    {
        "underruns",
        "replayed_events",
        "duplicates_dropped",
        "seq_gaps",
        "heard_ms",
        "audio_ms",
        "tool_calls",
        "tool_outputs",
    }
)
#: Per-turn figures taken elsewhere: drops and resumes are counted per session, and every
#: resume's times come through :meth:`Recorder.resumed` (a turn's figures hold only its last).
NOT_FROM_TURNS: Final = frozenset(
    {"drops", "resumes", "resume_ms", "reconnect_ms", "resume_handshake_ms"}
)
LIVE_WINDOW_S: Final = 10.0
#: Send lags buffered before they are folded into the histograms (about 1 s at 300 sessions).
LAG_FOLD_EVERY: Final = 3000


def _cap(text: str | None) -> str:
    return text or "-"


def _line(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc) + "\n").encode()


class Recorder(RunTally, Sink):
    """Aggregates one process's sessions and turns (see the module docstring)."""

    def __init__(
        self,
        *,
        origin: float,
        slice_s: float = 10.0,
        windows: Windows | None = None,
        worker: int = 0,
        out_dir: Path | None = None,
        thresholds_ms: tuple[int, ...] = continuity.DEFAULT_THRESHOLDS_MS,
        step: tuple[int, int] | None = None,
        writes: Writes | None = None,
    ) -> None:
        super().__init__(origin=origin, slice_s=slice_s, windows=windows, worker=worker)
        # a sweep level's lines say which level (and which try of it) they belong to
        self._tag: dict[str, int] = {} if step is None else {"level": step[0], "try": step[1]}
        self.thresholds_ms = thresholds_ms  # the continuity-OK thresholds (--continuity-thresholds)
        # send lags waiting to be folded into the slicer (see send_lag)
        self._lag_t: list[float] = []
        self._lag_v: list[float] = []
        self.active = 0
        self.admitted_live = 0
        self.waiting = 0  # open-loop arrivals waiting for a client-side slot (--max-concurrency)
        self._live_ttfa: deque[tuple[float, float]] = deque()
        # the live window of send lags: one (newest time, values) entry per folded batch, so
        # thousands of appends a second do not become thousands of tuples
        self._live_lag: deque[tuple[float, np.ndarray]] = deque()
        self._turns_file: JsonLines | None = None
        self._sessions_file: JsonLines | None = None
        # --ray: what this recorder takes also goes into the open live second (cut_second)
        self.seconds: SecondTally | None = None
        self._behaviour_file: JsonLines | None = None
        if out_dir is not None:
            # without a run's Writes (a test, a tool) a failed write raises WriteFailed at once
            suffix = "" if worker == 0 else f".w{worker}"
            self._turns_file = JsonLines(out_dir / f"turns{suffix}.jsonl", writes, append=True)
            self._sessions_file = JsonLines(
                out_dir / f"sessions{suffix}.jsonl", writes, append=True
            )
            self._behaviour_file = JsonLines(
                out_dir / f"behaviour{suffix}.jsonl", writes, append=True
            )

    # -- the Sink interface (called by sessions) --------------------------------------------

    def _clip(self, t: float) -> float:
        return max(t, self.origin)

    def session_started(self, record: SessionRecord) -> None:
        self.active += 1
        if record.client_queue_ms is not None:
            self._slicer.add_figure(
                self._clip(record.t_start), "client_queue_ms", record.client_queue_ms
            )

    def session_admitted(self, record: SessionRecord, capabilities: dict[str, Any]) -> None:
        self.admitted_live += 1
        if not self.capabilities:
            self.capabilities = dict(capabilities)

    def session_finished(self, record: SessionRecord) -> None:
        self.active -= 1
        t = self._clip(record.t_start)
        if record.admission == UNFINISHED:  # the run stopped it: counted apart, not an attempt
            cause = record.cause or UNFINISHED
            self.unfinished[cause] += 1
            self.unfinished_examples.setdefault(cause, record.end_reason)
            self._write_session(record)
            return
        self.admissions[record.admission] += 1
        self._slicer.add_admission(t, record.admission)
        if record.admission != "admitted":
            self.codes[f"{record.admission}:{_cap(record.code)}"] += 1
            cause = record.cause or record.admission
            self.causes[cause] += 1
            self.cause_examples.setdefault(cause, record.end_reason)
        if record.advertised_limit is not None:
            self.advertised_limits[record.advertised_limit] += 1
        self._slicer.add_figure(t, "connect_ms", record.connect_ms)
        self._slicer.add_figure(t, "handshake_ms", record.handshake_ms)
        self._slicer.add_figure(t, "time_to_reject_ms", record.time_to_reject_ms)
        if record.admission == "admitted":
            self.admitted_live -= 1
            end = self._clip(record.t_end or t)
            self._slicer.add_figure(end, "close_ms", record.close_ms)
            if self._slicer.phase_of(end) != "warmup":  # like the histograms: after warm-up
                rtf = continuity.count_session(self.counts, record.continuity)
                self._slicer.add_figure(end, "session_rtf", rtf)
                frames.count_session(self.counts, record.frames)
            self.intervals.append((record.t_created or record.t_start, record.t_closed))
            self.counts["sessions_admitted"] += 1
            self.counts["closed_cleanly"] += int(record.closed_cleanly)
            self.counts["turns_cut"] += record.turns_cut
            self.counts["appends"] += record.appends
            self.counts["skipped_appends"] += record.skipped_appends
            self.counts["unanswered_interruptions"] += record.unanswered_interruptions
            self.counts["drops"] += record.drops
            self.counts["unplanned_drops"] += record.unplanned_drops
            self.counts["sessions_with_drops"] += int(record.drops > 0)
            self.counts["resumes"] += record.resumes
            self.counts["resume_failures"] += record.resume_failures
            self.counts["commits_resent"] += record.commits_resent
            self.counts["turns_lost_at_drop"] += record.turns_lost_at_drop
            self.resume_outcomes.update(record.resume_outcomes)
        self.errors.update(record.errors)
        if self.seconds is not None:
            admitted = record.admission == "admitted"
            self.seconds.session(
                record.admission, sum(record.errors.values()), record.drops if admitted else 0
            )
        if record.errors:
            self._slicer.add_error(self._clip(record.t_end or t), sum(record.errors.values()))
        self.violations.update(record.violations)
        self.behaviours.update(record.behaviours)
        self._write_session(record)

    def _write_session(self, record: SessionRecord) -> None:
        if self._sessions_file is not None:
            line = record.to_json(self.origin)
            line.update(self._tag)
            self._sessions_file.write(_line(line))

    @property
    def slicer(self) -> TimeSlicer:
        """The time slicer, with every send lag recorded so far folded in."""
        if self._lag_t:
            self._fold_lags()
        return self._slicer

    def send_lag(self, t: float, lag_ms: float) -> None:
        """One append's send lag: buffered, folded into the histograms in batches.

        Every append of every session reports here (thousands a second at a few hundred
        sessions); two list appends are a fraction of a slice + phase lookup and two HDR
        records per value. The histograms come out identical (counts do not depend on
        order), and every reader (:attr:`slicer`, :meth:`live`) folds first.
        """
        self._lag_t.append(t)
        self._lag_v.append(lag_ms)
        if len(self._lag_t) >= LAG_FOLD_EVERY:
            self._fold_lags()

    def _fold_lags(self) -> None:
        ts, vs = self._lag_t, self._lag_v
        self._lag_t, self._lag_v = [], []
        values = np.array(vs, dtype=np.float64)
        self._live_lag.append((max(ts), values))
        if self.seconds is not None:
            self.seconds.send_lags(values)
        clipped = np.maximum(np.array(ts, dtype=np.float64), self.origin)
        self._slicer.add_figures(clipped, "send_lag_ms", values)

    def audio(self, t: float, audio_ms: float) -> None:
        self._slicer.add_audio(self._clip(t), audio_ms / 1000.0)

    def turn(self, record: TurnRecord, times: TurnTimes, session: SessionRecord) -> None:
        t_ns = times.t_eos or times.t_speech_start or time.monotonic_ns()
        t = self._clip(t_ns / NS_PER_S)
        figures: dict[str, float | None] = {}
        for name, fig in record.figures.items():
            if name in SUMMED or name in NOT_FROM_TURNS or name == "chunk_gap_ms":
                continue
            if isinstance(fig.value, (int, float)) and not isinstance(fig.value, bool):
                figures[name] = float(fig.value)
        if times.index == 1 and session.client_queue_ms is not None:
            for name in ("ttfa_ms", "turn_ms"):
                if figures.get(name) is not None:
                    figures[name.removesuffix("_ms") + "_with_queue_ms"] = (
                        figures[name] + session.client_queue_ms  # type: ignore[operator]
                    )
        self._slicer.add_turn(t, figures, record.outcome)
        verdict = continuity.judge(record, self.thresholds_ms)
        session.continuity.add(record, verdict)
        if self._slicer.phase_of(t) != "warmup":  # the rates and the percentiles: one window
            continuity.count(self.counts, verdict)
        if self.seconds is not None:
            self.seconds.turn(figures)
        for a, b in zip(times.deltas, times.deltas[1:], strict=False):
            self._slicer.add_figure(t, "chunk_gap_ms", (b.recv_ns - a.recv_ns) / NS_PER_MS)
        self.outcomes[record.outcome] += 1
        self.counts["turns"] += 1
        self.counts["early_start"] += int(record.early_start)
        for name in (
            "underruns",
            "seq_gaps",
            "duplicates_dropped",
            "replayed_events",
            "tool_calls",
            "tool_outputs",
        ):
            value = record.figures.get(name)
            if value is not None:
                self.counts[name] += int(value.value)
        if times.barge is not None:
            self.counts["interruptions"] += 1
            self.counts["interruptions_cancelled"] += int(times.status == "cancelled")
        if record.figures.get("ttfa_ms") is not None:
            self._live_ttfa.append((t, float(record.figures["ttfa_ms"].value)))
        if self._turns_file is not None:
            line = record.to_json()
            line["continuity"] = verdict.to_json()
            line.update(
                worker=self.worker,
                session=session.index,
                session_id=session.session_id,
                t=round(t - self.origin, 6),
                phase=self._slicer.phase_of(t),
                **self._tag,
            )
            self._turns_file.write(_line(line))

    def behaviour(self, t: float, figures: Figures, session: SessionRecord | None = None) -> None:
        """One session's conversation-behaviour figures (docs/metrics.md "Conversation
        behaviour"): each trial's time into its histogram, the counts added up, and every
        trial as one line of ``behaviour.jsonl`` (what ``report --compare`` bootstraps)."""
        t = self._clip(t)
        for value in figures.stop_latencies_ms:
            self._slicer.add_figure(t, "stop_latency_ms", value)
        for value in figures.response_gaps_ms:
            self._slicer.add_figure(t, "response_gap_ms", value)
        self.counts.update(figures.counts())
        if self._behaviour_file is not None:
            line: dict[str, Any] = {"worker": self.worker}
            if session is not None:
                line.update(session=session.index, session_id=session.session_id)
            line.update(t=round(t - self.origin, 6), phase=self._slicer.phase_of(t), **self._tag)
            line.update(figures.trials())
            self._behaviour_file.write(_line(line))

    # -- the joining session (engine.JoinSink) -------------------------------------------------

    def join_figure(self, t: float, name: str, value: float | None) -> None:
        """One figure of a joining session (``join_ttfa_ms`` …): its own histogram only."""
        self._slicer.add_figure(self._clip(t), name, value)

    def join_turn(self, record: TurnRecord, session: SessionRecord) -> None:
        """A joining session's first turn, as a ``turns.jsonl`` line marked ``join``."""
        if self._turns_file is not None:
            line = record.to_json()
            line.update(
                worker=self.worker,
                session=session.index,
                session_id=session.session_id,
                join=True,
                **self._tag,
            )
            self._turns_file.write(_line(line))

    def joined(self, record: SessionRecord) -> None:
        """A joining session is over: counted apart from the N users' attempts (``join.*``),
        written to ``sessions.jsonl`` with its index (-1)."""
        if record.admission != UNFINISHED:
            self.counts["join.attempts"] += 1
            if record.admission == "admitted":
                self.counts["join.admitted"] += 1
            else:
                self.counts[f"join.not_admitted.{record.cause or record.admission}"] += 1
        self._write_session(record)

    def resumed(self, t: float, figures: dict[str, float | None]) -> None:
        """One resume's times (``resume_ms``, ``reconnect_ms``, ``resume_handshake_ms``)."""
        t = self._clip(t)
        for name, value in figures.items():
            self._slicer.add_figure(t, name, value)

    # -- extra samples -----------------------------------------------------------------------

    def loop_lag(self, t: float, lag_ms: float) -> None:
        self._slicer.add_figure(self._clip(t), "loop_lag_ms", lag_ms)

    # -- reading ---------------------------------------------------------------------------

    def cut_second(self) -> dict[str, Any]:
        """The open live second as a delta (its send lags folded in first); the next opens."""
        assert self.seconds is not None, "no live seconds on this recorder"
        if self._lag_t:
            self._fold_lags()
        return self.seconds.cut(self.active)

    def live(self, now: float | None = None) -> dict[str, Any]:
        """What the dashboard shows (cheap; called about once a second)."""
        now = time.monotonic() if now is None else now
        if self._lag_t:
            self._fold_lags()
        for window in (self._live_ttfa, self._live_lag):
            while window and window[0][0] < now - LIVE_WINDOW_S:
                window.popleft()
        # outcomes are booked when a session ends; the live view also counts the sessions
        # still running, so "admitted" never reads 0 while admitted sessions are speaking
        return {
            "active": self.active,
            "admitted_now": self.admitted_live,
            "queued": self.waiting,
            "queued_total": self.counts["client_queued"],
            "attempts": sum(self.admissions.values()) + self.active,
            "admitted": self.admissions["admitted"] + self.admitted_live,
            "rejected": self.admissions["rejected_capacity"],
            "failed": sum(
                v for k, v in self.admissions.items() if k not in ("admitted", "rejected_capacity")
            ),
            "causes": dict(self.causes),
            "turns": self.counts["turns"],
            "drops": self.counts["drops"],
            "errors": dict(self.errors),
            "ttfa_window": [v for _t, v in self._live_ttfa],
            "send_lag_window": (
                np.concatenate([v for _t, v in self._live_lag]) if self._live_lag else []
            ),
        }

    def export_state(self) -> ExportState:
        """What ``--prometheus-rw`` pushes of this recorder now (docs/metrics.md "Remote
        write"): its tally's counts and histograms, its live sessions."""
        from duplexctl.export.state import of_tally

        return of_tally(self, active=self.active, admitted_now=self.admitted_live)

    def close(self) -> None:
        for f in (self._turns_file, self._sessions_file, self._behaviour_file):
            if f is not None:
                f.close()
        self._turns_file = self._sessions_file = self._behaviour_file = None


def live_percentiles(
    values: Iterable[float], ps: tuple[float, ...] = (50, 95, 99)
) -> list[float | None]:
    """Percentiles of a small live window (exact, numpy); Nones when empty."""
    arr = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
    if arr.size == 0:
        return [None for _ in ps]
    return [float(np.percentile(arr, p)) for p in ps]
