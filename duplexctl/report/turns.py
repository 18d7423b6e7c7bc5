"""Per-turn figures from raw timestamps, exactly as ``docs/metrics.md`` defines them.

Pure: the runner records *when things happened* (:class:`TurnTimes`, monotonic ns) and this
module turns that into figures, each carrying its ``measurement_origin`` so a number never
travels without the two points it was measured between. Keeping the arithmetic here, away
from sockets, lets every definition be tested with hand-made timestamps.

Clock conventions (docs/metrics.md "Clocks"): *send* = the websocket send of a client event
returned; *recv* = a server frame was read off the socket, before decoding and de-dup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from duplexctl.behaviour.figures import ORIGINS as BEHAVIOUR_ORIGINS
from duplexctl.protocol.settings import TurnEnd
from duplexctl.units import NS_PER_MS

# figure name -> measurement_origin (what minus what); the names are docs/metrics.md's
ORIGINS: Final[dict[str, str]] = {
    "ttfa_ms": "recv first non-empty audio delta of the answering response - t_eos "
    "(send of the append carrying the end of user speech); negative = early_start",
    "ttft_ms": "recv first non-empty transcript/text delta - t_eos",
    "ttfa_created_ms": "recv first audio delta - recv response.created",
    "ttfa_commit_ms": "recv first audio delta - send input_audio_buffer.commit",
    "first_audible_ms": "P0 (playback start: recv first audio delta + prebuffer) - t_eos",
    "turn_ms": "recv response.done - t_eos",
    "audio_ms": "assistant audio received for the response (metadata.audio_duration_ms, "
    "else bytes / format / rate)",
    "rtf": "(recv last delta - recv first delta) / (response audio ms - first chunk ms)",
    "rtf_omni": "vLLM-Omni rtf: (recv last delta - recv response.created) / response audio ms",
    "chunk_gap_ms": "recv audio delta - recv previous audio delta of the same response "
    "(n, p50, p95, p99, max)",
    "underruns": "audio chunks that arrived after the playback clock needed them",
    "stall_ms": "silence the playback clock inserted while waiting for late chunks",
    "audio_underrun_ms": "vLLM-Omni's audio_underrun: worst (recv chunk - recv first chunk - "
    "audio received before it) of the chunks the playback clock played, as ms; 0 when none "
    "was late",
    "heard_ms": "position of the response the playback clock reached (flushed on a stop signal)",
    "cancel_ack_ms": "recv response.done (status cancelled) - t_bi (send of the first "
    "interrupting speech append, or of response.cancel / barge_in)",
    "model_stop_ms": "recv of the end of the answer the model itself ended (not cancelled: "
    "response.done completed, or its speech's end on a continuous lane) - t_bi of the spoken "
    "barge-in over it",
    "audio_stop_ms": "recv last audio delta of the interrupted response - t_bi (0 if none after)",
    "leaked_audio_ms": "audio ms of the interrupted response received after t_bi",
    "heard_stop_ms": "end of the interrupted response's playback on the playback clock - t_bi",
    "post_interrupt_ttfa_ms": "recv first audio delta of the next response - "
    "send of the append carrying the end of the interrupting speech",
    "resume_ms": "recv session.resumed - t_drop (socket killed), scripted wait included",
    "reconnect_ms": "websocket open complete - t_drop (scripted wait included)",
    "resume_handshake_ms": "recv session.resumed - send session.resume",
    "replayed_events": "sequenced events in the burst right after session.resumed (frames "
    "< 10 ms apart: the journal replay), duplicates included",
    "duplicates_dropped": "replayed events discarded because their seq was already processed",
    "seq_gaps": "missing server_event_seq numbers across the resume (must be 0)",
    "tool_calls": "tool calls the model made in this turn (function_call_arguments.done)",
    "tool_outputs": "function_call_outputs the client sent for them (one per call: answered once)",
    "tool_call_ms": "recv of the turn's first tool call - t_eos (speech end -> tool call)",
    "tool_answer_text_ms": "recv first non-empty answer text after the tool's output - send "
    "of that function_call_output",
    "tool_answer_audio_ms": "recv first audible answer audio after the tool's output - send "
    "of that function_call_output",
    "task_ms": "recv of the end of the answer that used the tool's result - t_eos (task "
    "completion)",
    "drops": "connections lost while this turn was in flight that the client did not close "
    "(scripted drop steps and the server's own drops; 0 when none)",
    "resumes": "of those drops, the ones answered by session.resumed (0 when none)",
}
# counts that are 0, not missing, on a turn where nothing happened (expectations compare 0)
COUNT_FIGURES: Final = frozenset({"drops", "resumes"})

# run-wide figures a scenario's top-level ``[expect]`` table may bound (issue 17.4)
RUN_ORIGINS: Final[dict[str, str]] = {
    "drops": "connections lost during the run that the client did not close (scripted drop "
    "steps and the server's own drops)",
    "resumes": "drops answered by session.resumed",
    "resume_failures": "drops whose resume failed",
    "resume_ms": "the longest recv session.resumed - t_drop of the run (0 when no resume)",
    "unanswered_turns": "turns given up on as no_response: committed, or waited for, without "
    "an answer within the response timeout",
    # how the conversation behaves (docs/metrics.md "Conversation behaviour")
    **BEHAVIOUR_ORIGINS,
}

# expectations may name these (numbers) ...
EXPECTABLE_FIGURES: Final = frozenset(ORIGINS)
# ... and these (text): the outcome and what response.done said
TEXT_FIELDS: Final = frozenset({"outcome", "status", "reason", "early_start"})


@dataclass(slots=True)
class Delta:
    """One non-empty audio delta: when it was read and how much audio it carried."""

    recv_ns: int
    audio_ms: float


@dataclass(slots=True)
class BargeTimes:
    """A scripted interruption of this turn's response.

    ``kind``: ``speech`` (spoken barge-in), ``barge_in`` (event), ``cancel`` (response.cancel).
    ``interrupt_turn``: index of the user turn the interrupting speech opened (its t_eos and
    first audio give ``post_interrupt_ttfa_ms``).
    """

    kind: str
    t_bi: int
    interrupt_turn: int | None = None


@dataclass(slots=True)
class ResumeTimes:
    """One scripted drop + resume while this turn was current."""

    t_drop: int
    t_open: int | None = None
    t_resume_sent: int | None = None
    t_resumed: int | None = None
    outcome: str = "pending"  # resumed | session_resume_expired | resync_required | <code>
    automatic: bool = False  # the server dropped us and the connection resumed on its own
    replayed_events: int = 0
    duplicates_dropped: int = 0
    seq_gaps: int = 0
    scripted_wait_ms: float = 0.0


@dataclass(slots=True)
class ToolCallTimes:
    """One tool call the model made in this turn, and its answer (docs/protocol.md §13.4)."""

    call_id: str
    name: str | None
    t_call: int  # recv response.function_call_arguments.done
    t_output: int | None = None  # send of its function_call_output
    outputs: int = 0  # function_call_outputs sent for it (exactly 1 when answered)


@dataclass(slots=True)
class TurnTimes:
    """Raw timestamps (monotonic ns) and counters of one user turn and its answer."""

    index: int
    step: int = 0
    source: str | None = None
    end_mode: str = TurnEnd.VAD.value  # a TurnEnd value, BACKCHANNEL or UNSOLICITED
    t_speech_start: int | None = None
    t_eos: int | None = None
    t_commit: int | None = None
    t_speech_stopped: int | None = None
    t_created: int | None = None
    response_id: str | None = None
    deltas: list[Delta] = field(default_factory=list)
    first_text_recv: int | None = None
    t_done: int | None = None
    status: str | None = None
    reason: str | None = None
    listened: bool = False
    error: str | None = None
    timed_out: bool = False
    p0: int | None = None
    playback_end: int | None = None
    underruns: int = 0
    stall_ms: float = 0.0
    # vLLM-Omni's worst deficit (audio/playback.py); None where no simulated clock measured it
    audio_underrun_ms: float | None = None
    heard_ms: float | None = None
    barge: BargeTimes | None = None
    resumes: list[ResumeTimes] = field(default_factory=list)
    tool_calls: list[ToolCallTimes] = field(default_factory=list)
    text_recvs: list[int] = field(default_factory=list)  # non-empty text of the answer (tools)


@dataclass(frozen=True, slots=True)
class Figure:
    value: Any
    measurement_origin: str

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "measurement_origin": self.measurement_origin}


@dataclass(slots=True)
class TurnRecord:
    """A turn's figures (only those that apply) plus what happened, ready to print or save."""

    index: int
    step: int
    source: str | None
    end_mode: str
    response_id: str | None
    outcome: str
    status: str | None
    reason: str | None
    early_start: bool
    error: str | None
    figures: dict[str, Figure]
    expectations: list[dict[str, Any]] = field(default_factory=list)

    def value(self, name: str) -> Any:
        """The value an expectation compares: text fields, or a figure (a gap summary's max)."""
        if name in TEXT_FIELDS:
            return getattr(self, name)
        fig = self.figures.get(name)
        if fig is None:
            return 0 if name in COUNT_FIGURES else None
        if isinstance(fig.value, dict):
            return fig.value.get("max")
        return fig.value

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "step": self.step,
            "source": self.source,
            "end_mode": self.end_mode,
            "response_id": self.response_id,
            "outcome": self.outcome,
            "status": self.status,
            "reason": self.reason,
            "early_start": self.early_start,
            "error": self.error,
            "figures": {name: fig.to_json() for name, fig in self.figures.items()},
            "expectations": self.expectations,
        }


def _ms(later: int | None, earlier: int | None) -> float | None:
    if later is None or earlier is None:
        return None
    return round((later - earlier) / NS_PER_MS, 3)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def outcome_of(t: TurnTimes) -> str:
    """docs/metrics.md ``outcome``: spoke, listened, no_response, cancelled, failed."""
    if t.status == "cancelled":
        return "cancelled"
    if t.status == "failed" or (t.error is not None and t.t_done is None):
        return "failed"
    if t.listened:
        return "listened"
    if t.t_done is not None:
        return "spoke" if t.deltas or t.first_text_recv is not None else "listened"
    return "no_response"


def compute_turn(t: TurnTimes, turns_by_index: dict[int, TurnTimes] | None = None) -> TurnRecord:
    """Figures of one turn; ``turns_by_index`` resolves the interrupting turn of a barge-in."""
    figs: dict[str, Any] = {}
    first = t.deltas[0].recv_ns if t.deltas else None
    last = t.deltas[-1].recv_ns if t.deltas else None
    audio_ms = round(sum(d.audio_ms for d in t.deltas), 3) if t.deltas else None

    figs["ttfa_ms"] = _ms(first, t.t_eos)
    figs["ttft_ms"] = _ms(t.first_text_recv, t.t_eos)
    figs["ttfa_created_ms"] = _ms(first, t.t_created)
    figs["ttfa_commit_ms"] = _ms(first, t.t_commit)
    figs["first_audible_ms"] = _ms(t.p0, t.t_eos)
    figs["turn_ms"] = _ms(t.t_done, t.t_eos)
    figs["audio_ms"] = audio_ms

    if t.deltas and audio_ms is not None:
        span = _ms(last, first)
        denom = audio_ms - t.deltas[0].audio_ms
        if span is not None and denom > 0:
            figs["rtf"] = round(span / denom, 4)
        if t.t_created is not None and audio_ms > 0:
            figs["rtf_omni"] = round((last - t.t_created) / NS_PER_MS / audio_ms, 4)  # type: ignore[operator]
    if len(t.deltas) >= 2:
        gaps = [
            (b.recv_ns - a.recv_ns) / NS_PER_MS
            for a, b in zip(t.deltas, t.deltas[1:], strict=False)
        ]
        figs["chunk_gap_ms"] = {
            "n": len(gaps),
            "p50": round(percentile(gaps, 50), 3),
            "p95": round(percentile(gaps, 95), 3),
            "p99": round(percentile(gaps, 99), 3),
            "max": round(max(gaps), 3),
        }
    if t.p0 is not None:
        figs["underruns"] = t.underruns
        figs["stall_ms"] = round(t.stall_ms, 3)
        if t.heard_ms is not None:
            figs["heard_ms"] = round(t.heard_ms, 3)
        # continuity is measured on what was played: not for an answer cut before it played
        if t.audio_underrun_ms is not None and (t.heard_ms is None or t.heard_ms > 0):
            figs["audio_underrun_ms"] = round(t.audio_underrun_ms, 3)

    if t.barge is not None:
        t_bi = t.barge.t_bi
        if t.status == "cancelled":
            figs["cancel_ack_ms"] = _ms(t.t_done, t_bi)
        elif t.barge.kind == "speech" and t.t_done is not None and t.t_done >= t_bi:
            figs["model_stop_ms"] = _ms(t.t_done, t_bi)  # no barge-in on the lane: it stopped
        after = [d for d in t.deltas if d.recv_ns > t_bi]
        figs["audio_stop_ms"] = _ms(after[-1].recv_ns, t_bi) if after else 0.0
        figs["leaked_audio_ms"] = round(sum(d.audio_ms for d in after), 3)
        if t.playback_end is not None:
            figs["heard_stop_ms"] = max(0.0, _ms(t.playback_end, t_bi) or 0.0)
        nxt = (turns_by_index or {}).get(t.barge.interrupt_turn or -1)
        if nxt is not None and nxt.deltas:
            figs["post_interrupt_ttfa_ms"] = _ms(nxt.deltas[0].recv_ns, nxt.t_eos)

    if t.tool_calls:
        figs.update(tool_figures(t))

    if t.resumes:
        r = t.resumes[-1]
        figs["resume_ms"] = _ms(r.t_resumed, r.t_drop)
        figs["reconnect_ms"] = _ms(r.t_open, r.t_drop)
        figs["resume_handshake_ms"] = _ms(r.t_resumed, r.t_resume_sent)
        figs["replayed_events"] = sum(x.replayed_events for x in t.resumes)
        figs["duplicates_dropped"] = sum(x.duplicates_dropped for x in t.resumes)
        figs["seq_gaps"] = sum(x.seq_gaps for x in t.resumes)
        figs["drops"] = len(t.resumes)
        figs["resumes"] = sum(x.outcome == "resumed" for x in t.resumes)

    ttfa = figs["ttfa_ms"]
    return TurnRecord(
        index=t.index,
        step=t.step,
        source=t.source,
        end_mode=t.end_mode,
        response_id=t.response_id,
        outcome=outcome_of(t),
        status=t.status,
        reason=t.reason,
        early_start=ttfa is not None and ttfa < 0,
        error=t.error,
        figures={k: Figure(v, ORIGINS[k]) for k, v in figs.items() if v is not None},
    )


def tool_figures(t: TurnTimes) -> dict[str, Any]:
    """The tool-call figures of a turn (docs/metrics.md "Tool calls")."""
    figs: dict[str, Any] = {
        "tool_calls": len(t.tool_calls),
        "tool_outputs": sum(c.outputs for c in t.tool_calls),
        "tool_call_ms": _ms(t.tool_calls[0].t_call, t.t_eos),
    }
    sent = [c.t_output for c in t.tool_calls if c.t_output is not None]
    if sent:
        t_out = sent[0]
        text = next((r for r in t.text_recvs if r >= t_out), None)
        audio = next((d.recv_ns for d in t.deltas if d.recv_ns >= t_out), None)
        figs["tool_answer_text_ms"] = _ms(text, t_out)
        figs["tool_answer_audio_ms"] = _ms(audio, t_out)
        if t.t_done is not None and t.t_done >= t_out and t.status != "cancelled":
            figs["task_ms"] = _ms(t.t_done, t.t_eos)
    return figs


def compute_turns(turns: Sequence[TurnTimes]) -> list[TurnRecord]:
    """Figures of every turn (cross-turn figures such as post_interrupt_ttfa_ms resolved)."""
    by_index = {t.index: t for t in turns}
    return [compute_turn(t, by_index) for t in turns]


def resume_outcomes(turns: Sequence[TurnTimes]) -> list[str]:
    """Every scripted resume's outcome, in order (for the summary line)."""
    return [r.outcome for t in turns for r in t.resumes]
