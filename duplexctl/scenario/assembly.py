"""Turn assembly: a turn's raw times completed, its end decided, its record handed on.

The listener and the microphone stamp *when things happened*; this part decides when a turn
is over (its answer played out, was flushed, refused, or never came) and completes its
:class:`~duplexctl.report.turns.TurnTimes` from the response track and the playback clock,
so :func:`~duplexctl.report.turns.compute_turn` can make figures of it.

**No silent turns** (issue 16.1): a turn whose input was committed — the client's commit
sent, or the server's ``speech_stopped`` / ``committed`` for it — and that got no
``response.created`` within the response timeout is over as ``no_response`` with a reason,
and the reason is an error of the run (``errors``, code ``no_response``): replay exits 1 and
load counts it. So is a turn given up on by a ``wait`` step. A drop and resume does not
reset the clock: what the server never answered is an error whatever the connection did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Final

from duplexctl.protocol.client_state import ResponseTrack
from duplexctl.protocol.commits import LOST_AT_DROP
from duplexctl.protocol.settings import BACKCHANNEL
from duplexctl.report.turns import (
    Delta,
    TurnRecord,
    TurnTimes,
    compute_turn,
    compute_turns,
)
from duplexctl.scenario.state import LiveTurn, PendingResume, Play, RunState, now_ns
from duplexctl.units import NS_PER_S

#: the error code an unanswered turn is recorded under (report.json ``errors``)
NO_RESPONSE: Final = "no_response"
_NEVER: Final = 1 << 62


class TurnAssembly:
    """Ends turns and makes their records (see the module docstring)."""

    def __init__(self, run: RunState) -> None:
        self.run = run
        self._held: list[LiveTurn] = []  # headless: finished, waiting for their interruption
        self._reported: set[int] = set()  # headless: turn indexes given to on_turn
        self.next_answer_due_ns = _NEVER  # earliest answer_due_ns of a waiting turn

    # -- ending turns ------------------------------------------------------------------------

    def finish(self, turn: LiveTurn) -> None:
        """The turn's answer is over (played out, flushed, refused or given up on)."""
        run = self.run
        turn.finished.set()
        run.report_dirty = True
        headless = run.headless
        if headless is not None and headless.on_turn is not None:
            if turn.index not in self._reported and turn not in self._held:
                self._held.append(turn)
            self._report_turns(headless.on_turn)

    def committed(self, turn: LiveTurn, at_ns: int) -> None:
        """``turn``'s input was committed at ``at_ns``: its answer is due within the
        response timeout (the earliest commit counts; a later one does not extend it)."""
        if turn.answer_due_ns is not None or turn.response_id is not None:
            return
        due = at_ns + int(self.run.config.response_timeout_s * NS_PER_S)
        turn.answer_due_ns = due
        self.next_answer_due_ns = min(self.next_answer_due_ns, due)

    def expire_unanswered(self, now: int) -> None:
        """Give up on every committed turn whose answer is overdue at ``now`` (ns)."""
        if now < self.next_answer_due_ns:
            return
        upcoming = _NEVER
        timeout = self.run.config.response_timeout_s
        for turn in self.run.turns:
            due = turn.answer_due_ns
            if due is None or turn.response_id is not None or turn.finished.is_set():
                continue
            if due <= now:
                self.give_up(turn, f"no response.created within {timeout:g} s of the commit")
            else:
                upcoming = min(upcoming, due)
        self.next_answer_due_ns = upcoming

    def stop_waiting(self, turn: LiveTurn) -> None:
        """A wait ran out: an answer that ended (``response.done``) but still plays is cut
        there (its figures up to now); one that never came or never ended is an error."""
        if turn.finished.is_set():
            return
        if not turn.done.is_set():
            self.give_up(turn, self.unanswered_reason(turn))
            return
        turn.frozen_ns = now_ns()
        turn.times.timed_out = True
        self.finish(turn)

    def give_up(self, turn: LiveTurn, reason: str, *, code: str = NO_RESPONSE) -> None:
        """No answer came in time: the turn ends ``no_response`` and that is an error —
        ``lost_at_drop`` when its commit never reached the server (protocol/commits.py)."""
        if turn.finished.is_set():
            return
        run = self.run
        commits = run.commits
        if commits is not None:
            lost = commits.lost_reason(turn) if code == NO_RESPONSE else None
            if lost is not None:
                code, reason = LOST_AT_DROP, f"lost at the drop: {lost}"
            commits.forget(turn)
        t = now_ns()
        turn.frozen_ns = t
        turn.times.timed_out = True
        turn.times.reason = reason
        run.errors.append(
            {
                "t_ms": run.t_ms(t),
                "code": code,
                "message": f"turn {turn.index}: {reason}",
                "turn": turn.index,
            }
        )
        if run.artifacts is not None:
            run.artifacts.note(t, f"turn.{code}", turn=turn.index, reason=reason)
        turn.done.set()
        self.finish(turn)

    def unanswered_reason(self, turn: LiveTurn) -> str:
        """Why a turn a ``wait`` gave up on has no answer, in the user's terms."""
        timeout = self.run.config.response_timeout_s
        if turn.response_id is not None:
            return f"response.created but no response.done within {timeout:g} s"
        if turn.answer_due_ns is not None or turn.times.t_commit is not None:
            return f"no response.created within {timeout:g} s of the commit"
        return f"the server never ended the turn (no commit or answer within {timeout:g} s)"

    # -- records -------------------------------------------------------------------------------

    @property
    def unreported_turns(self) -> int:
        """Headless: turns never handed to ``on_turn`` (cut by the end of the session)."""
        return len(self.run.turns) - len(self._reported)

    def _report_turns(self, on_turn: Callable[[TurnRecord, TurnTimes], None]) -> None:
        """Hand finished turns to ``on_turn`` once each; an interrupted turn waits until
        its interrupting turn is finished too (``post_interrupt_ttfa_ms`` needs it)."""
        for turn in list(self._held):
            nxt = turn.interrupted_by
            if nxt is not None and not nxt.finished.is_set():
                continue
            self._held.remove(turn)
            self._reported.add(turn.index)
            if turn.times.end_mode == BACKCHANNEL:  # no user turn: not a turn of the run
                continue
            times = self.times(turn)
            by_index = {turn.index: times}
            if nxt is not None:
                by_index[nxt.index] = self.times(nxt)
            on_turn(compute_turn(times, by_index), times)

    def records(self) -> list[TurnRecord]:
        """Every turn's figures as of now (cross-turn figures resolved)."""
        return compute_turns([self.times(t) for t in self.run.turns])

    def times(self, turn: LiveTurn) -> TurnTimes:
        """The turn's raw times completed from its response track and playback clock."""
        run = self.run
        t = dataclasses.replace(turn.times, deltas=[], resumes=list(turn.times.resumes))
        t.listened = turn.listened
        cutoff = turn.frozen_ns if turn.frozen_ns is not None else _NEVER
        cs = run.conn.session if run.conn is not None else None
        track = cs.responses.get(turn.response_id) if cs and turn.response_id else None
        spoken = track is not None and track.answer_start_ns is not None
        if track is not None:

            def upto(x: int | None) -> int | None:
                return x if x is not None and x <= cutoff else None

            if spoken:  # a continuous lane: the answer is the speech in the response (§13.2)
                answer_end = track.answer_end_ns
                last = min(cutoff, answer_end) if answer_end is not None else cutoff
                t.deltas = [Delta(r, e - s) for r, s, e, a in track.deltas if a and r <= last]
                t.first_text_recv = upto(track.first_text_ns)
                if upto(answer_end) is not None:
                    t.t_done = answer_end
                    if track.answer_end_by == "silence":
                        t.status, t.reason = "completed", "silence"
                    else:
                        t.status, t.reason = track.status, track.reason
            else:
                t.t_created = upto(track.created_ns)
                t.deltas = [Delta(r, e - s) for r, s, e, _ in track.deltas if e > s and r <= cutoff]
                t.first_text_recv = upto(track.first_text_ns)
                if upto(track.done_ns) is not None:
                    t.t_done, t.status, t.reason = track.done_ns, track.status, track.reason
            if track.listen_ns is not None and track.listen_ns <= cutoff:
                t.listened = True
            if t.tool_calls:  # the tool figures read the answer's text after the output
                t.text_recvs = [r for r in track.text_ns if r <= cutoff]
        play = run.plays.get(turn.response_id or "")
        first_audible = play.clock.first_audible if play is not None else None
        if play is not None and first_audible is not None and track is not None and spoken:
            self._speech_playback(t, play, track)
        elif play is not None and first_audible is not None:
            clock = play.clock
            t.p0 = int(first_audible * NS_PER_S)
            end = clock.end_time()
            t.playback_end = int(end * NS_PER_S) if end is not None else None
            t.underruns, t.stall_ms = clock.underruns, clock.stall_ms
            t.audio_underrun_ms = clock.audio_underrun_ms
            t.heard_ms = clock.heard_ms if play.flushed else clock.played_ms(now_ns() / NS_PER_S)
        for _, r in run.resumes:
            if r.times in t.resumes:
                self.finish_resume(r)
        return t

    @staticmethod
    def _speech_playback(t: TurnTimes, play: Play, track: ResponseTrack) -> None:
        """A continuous lane's playback figures are the speech's, not the response's: P0 is
        when its first audible packet plays, the end when its last one has, and heard_ms the
        speech heard (the silence around it plays too, and says nothing)."""
        clock = play.clock
        start_ms = track.speech_start_ms
        if start_ms is None:  # the answer is text so far
            return
        p0 = clock.wall_at(start_ms)
        end = clock.wall_at(track.speech_end_ms)
        if play.flushed:
            flush_end = clock.end_time()
            if flush_end is not None:
                end = flush_end if end is None else min(end, flush_end)
        t.p0 = int(p0 * NS_PER_S) if p0 is not None else None
        t.playback_end = int(end * NS_PER_S) if end is not None else None
        t.underruns, t.stall_ms = clock.underruns, clock.stall_ms
        played = clock.heard_ms if play.flushed else clock.played_ms(now_ns() / NS_PER_S)
        span = track.speech_end_ms - start_ms
        t.heard_ms = min(span, max(0.0, (played or 0.0) - start_ms))

    def finish_resume(self, r: PendingResume) -> None:
        """Complete a resume's counts from the session's de-dup counters."""
        cs = self.run.conn.session if self.run.conn is not None else None
        if cs is None:
            return
        dups = (r.dups_after if r.dups_after is not None else cs.duplicates_dropped) - r.dups_before
        gaps = (r.gaps_after if r.gaps_after is not None else cs.seq_gaps) - r.gaps_before
        r.times.duplicates_dropped = dups
        r.times.seq_gaps = gaps
        r.times.replayed_events = r.burst + dups
