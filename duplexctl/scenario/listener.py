"""Replay's listener: what the server said, at receive time, onto the turns.

Called by the connection for every happening (synchronously, in the socket's receive path,
so it stays quick): assigns responses to turns, feeds each answer's playback clock, flushes
on the first of the server's stop signals (protocol/playback_stop.py: a barge-in decision
or a cancelled ``response.done``), starts the answer clock of
a committed turn (the server's ``speech_stopped`` / ``committed``), records errors, logs the
wire trace, and keeps the record of every drop and resume — the scripted ones (a ``drop``
step) and the ones the server caused, which the connection resumes by itself and which
would otherwise look healthy (issue 17.4). After a resume it sends what the server's resume
says it never received (issue 31.4): the final playback acks (the playback duty decides) and
the commits (the commit ledger decides, protocol/commits.py); a commit that cannot be
recovered makes its turn lost at the drop.

**Which response answers a turn.** Where a response opens when the model decides to speak
(Qwen3-Omni, MiniCPM-o), it is bound to the turn it answers at ``response.created``. On a
lane that streams audio whether or not the model speaks (Nemotron VoiceChat, docs/protocol.md
§13.2) a response opens before the model speaks and may never speak: there the protocol state
says where the answer is (``AnswerStarted`` / ``AnswerEnded``: the first non-empty text or
audible packet, then ``response.done`` or a second of silence) and only that binds; a
response bound at ``response.created`` before the session's first packet showed the lane
streams silence is let go again by that packet. A tool call's synthetic response answers no
turn (§13.4); its call goes to the tool answerer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from duplexctl.client.connection import ConnectionLost
from duplexctl.protocol.cadence import refused_samples
from duplexctl.protocol.client_state import (
    AnswerEnded,
    AnswerStarted,
    AudioDelta,
    Committed,
    ErrorReceived,
    FunctionCall,
    Happening,
    Listen,
    OverlapDecision,
    ResponseCreated,
    ResponseDone,
    SessionClosed,
    SessionExpired,
    SessionResumed,
    SpeechStopped,
    ViolationRecorded,
)
from duplexctl.protocol.commits import LOST_AT_DROP, Verdicts
from duplexctl.protocol.errors import BOOKKEEPING_CODES
from duplexctl.protocol.playback_stop import stops_playback
from duplexctl.report.turns import ResumeTimes
from duplexctl.scenario.assembly import TurnAssembly
from duplexctl.scenario.model import TurnEnd
from duplexctl.scenario.playback import ReplayPlayback
from duplexctl.scenario.state import LiveTurn, PendingResume, RunState, now_ns
from duplexctl.units import NS_PER_MS, NS_PER_S

BURST_GAP_NS: Final = 10 * NS_PER_MS  # frames closer than this after session.resumed = the replay
# errors that concern playback bookkeeping, not whether a turn was answered


class Listener:
    """The receive side of a run (see the module docstring)."""

    def __init__(self, run: RunState, playback: ReplayPlayback, assembly: TurnAssembly) -> None:
        self.run = run
        self.playback = playback
        self.assembly = assembly
        self._log_buffer: list[Happening] | None = []  # recv during open, before the send line
        # the model decides when to answer: a commit does not oblige it to (docs §6.1)
        self._commits_oblige = run.config.end_mode is not TurnEnd.MODEL
        # the tool answerer (tools.py), told of every call; None: calls are not answered
        self.on_call: Callable[[FunctionCall], None] | None = None

    def on_happening(self, h: Happening) -> None:
        try:
            self._handle(h)
        except Exception as exc:  # never break the connection's reader
            self.run.problems.append(f"internal error handling {h.type}: {exc!r}")

    def flush_open_log(self) -> None:
        """Write the opening session.update, then what was received during the handshake."""
        run = self.run
        buffered, self._log_buffer = self._log_buffer or [], None
        if run.artifacts is None:
            return
        conn = run.conn
        t_sent = conn.timings.t_update_sent_ns if conn is not None else None
        update = {"type": "session.update", "session": run.config.settings.to_session_object()}
        run.artifacts.event("send", t_sent or run.origin_ns, update)
        for h in buffered:
            self._log_recv(h)

    def _handle(self, h: Happening) -> None:
        run = self.run
        if self._log_buffer is not None:
            self._log_buffer.append(h)
        elif run.artifacts is not None:
            self._log_recv(h)
        if run.resumes:
            self._count_burst(h)
        commits = run.commits
        if commits is not None and not isinstance(h, AudioDelta):
            verdicts = commits.on_happening(h)
            if verdicts.duplicate:  # our own commit sent twice: no news about a turn
                return
            self._decided(verdicts)
        if isinstance(h, AudioDelta):  # the most frequent, so first (the types exclude each other)
            self._audio(h)
        elif isinstance(h, ResponseCreated):
            self._created(h)
        elif isinstance(h, AnswerStarted):
            self._answer_started(h)
        elif isinstance(h, AnswerEnded):
            self._answer_ended(h)
        elif isinstance(h, ResponseDone):
            self._response_done(h)
        elif isinstance(h, OverlapDecision):
            if stops_playback(h):  # the server heard the user over the answer
                self.playback.flush_playing(h.recv_ns)
        elif isinstance(h, FunctionCall):
            run.unassign(h.response_id)  # bound at its response.created: it answers no turn
            if self.on_call is not None:
                self.on_call(h)
        elif isinstance(h, Listen) and h.response_id is not None:
            turn = self._bound(h.response_id)
            if turn is not None:
                turn.listened = True
        elif isinstance(h, SpeechStopped):
            turn = run.awaiting(need_eos=True)
            if turn is not None:
                if turn.times.t_speech_stopped is None:
                    turn.times.t_speech_stopped = h.recv_ns
                if self._commits_oblige:
                    self.assembly.committed(turn, h.recv_ns)
        elif isinstance(h, Committed):
            self._committed(h)
        elif isinstance(h, ErrorReceived):
            self._error(h)
        elif isinstance(h, (SessionClosed, SessionExpired)):
            if not run.closing:
                run.problems.append(f"server ended the session: {h.type} ({h.reason})")
                run.ended_by = h.type + (f": {h.reason}" if h.reason else "")
            run.ended.set()
        elif isinstance(h, ConnectionLost):
            self._connection_lost(h)
        elif isinstance(h, SessionResumed):
            self._resumed(h)
        if run.headless is None:  # headless, the microphone loop services (no ticker)
            run.wake.set()

    def _log_recv(self, h: Happening) -> None:
        artifacts = self.run.artifacts
        if artifacts is None:
            return
        if isinstance(h, ConnectionLost):
            artifacts.note(h.recv_ns, "connection.lost", reason=h.reason, resuming=h.resuming)
        elif isinstance(h, ViolationRecorded):  # with its evidence (issue 16.1)
            artifacts.note(h.recv_ns, "violation", **h.violation.to_dict())
        else:
            artifacts.event("recv", h.recv_ns, h.frame)

    # -- answers -----------------------------------------------------------------------------

    def _created(self, h: ResponseCreated) -> None:
        run = self.run
        cs = run.session
        if run.artifacts is not None:
            run.artifacts.response_started(h.response_id, run.config.settings.output_rate)
        if not cs.continuous_output:  # else the answer will say where it is
            run.assign(h.response_id, backchannel=h.backchannel)

    def _bound(self, response_id: str) -> LiveTurn | None:
        """The turn ``response_id`` answers, bound now if this lane binds it here (see the
        module docstring); None while it answers none (yet)."""
        run = self.run
        turn = run.by_response.get(response_id)
        if turn is not None:
            return turn
        cs = run.session
        track = cs.responses.get(response_id)
        if cs.continuous_output or (track is not None and track.kind == "function_call"):
            return None
        return run.assign(response_id)

    def _answer_started(self, h: AnswerStarted) -> None:
        """A continuous lane's answer began: it answers the turn awaiting one."""
        run = self.run
        turn = run.assign(h.response_id)
        play = run.plays.get(h.response_id)
        if play is not None and play.turn is None:
            play.turn = turn
        track = run.session.responses.get(h.response_id)
        if track is not None and track.first_audible_ns is not None and turn.frozen_ns is None:
            turn.first_audio.set()

    def _answer_ended(self, h: AnswerEnded) -> None:
        """A continuous lane's answer is over: its turn ends when its speech has played."""
        turn = self.run.by_response.get(h.response_id)
        if turn is None:
            return
        turn.done.set()
        self.playback.answer_ended(h.response_id, turn)
        self.run.report_dirty = True

    def _audio(self, h: AudioDelta) -> None:
        run = self.run
        turn = self._bound(h.response_id)
        cs = run.session
        if turn is not None and cs.continuous_output and not h.audible:
            track = cs.responses.get(h.response_id)
            if track is not None and track.first_audible_ns is None and not track.first_text_ns:
                # bound at response.created before the lane showed it streams silence: the
                # response answers a turn only once the model speaks in it
                run.unassign(h.response_id)
                turn = None
        self.playback.received(h, turn)
        if run.artifacts is not None and h.pcm:
            run.artifacts.response_audio(h.response_id, h.pcm, h.sample_rate_hz)
        duration = h.audio_end_ms - h.audio_start_ms
        # where the model may open a response before it speaks, its audio is its voice
        audible = h.audible if cs.model_native else duration > 0
        if (
            turn is not None
            and audible
            and not turn.first_audio.is_set()
            and turn.frozen_ns is None
        ):
            turn.first_audio.set()
        headless = run.headless
        on_audio = headless.on_audio if headless is not None else None
        if on_audio is not None and duration > 0:
            on_audio(h.recv_ns / NS_PER_S, duration)

    def _response_done(self, h: ResponseDone) -> None:
        run = self.run
        if run.artifacts is not None:
            run.artifacts.response_finished(h.response_id, h.status or "unknown")
        stops = stops_playback(h)  # cancelled (protocol/playback_stop.py)
        if run.session.continuous_output:  # the answer's end is AnswerEnded (it follows)
            bound = run.by_response.get(h.response_id)
            if bound is not None and stops:
                self.playback.flush(bound, h.recv_ns)
            return
        turn = self._bound(h.response_id)
        if turn is None:  # a tool call's response: it answered no turn
            return
        if stops:
            self.playback.flush(turn, h.recv_ns)
        turn.done.set()
        if self.playback.answer_over(h.response_id):
            self.assembly.finish(turn)
        run.report_dirty = True

    def _committed(self, h: Committed) -> None:
        run = self.run
        turn = run.awaiting(need_eos=True)
        if turn is None:
            return
        if h.no_response or h.empty:  # nothing to answer: the turn is over
            turn.listened = True
            turn.done.set()
            self.assembly.finish(turn)
        elif self._commits_oblige:
            self.assembly.committed(turn, h.recv_ns)

    def _error(self, h: ErrorReceived) -> None:
        run = self.run
        err = h.error
        run.errors.append({"t_ms": run.t_ms(h.recv_ns), "code": err.code, "message": err.message})
        if refused_samples(err) is not None:
            return  # an append longer than the lane takes: the microphone follows the limit
        turn = run.awaiting(need_eos=False)
        if turn is not None and err.code not in BOOKKEEPING_CODES and turn.response_id is None:
            turn.times.error = err.code
            if run.headless is not None and h.seq is not None:
                turn.done.set()  # the server failed the turn: no answer will come
                self.assembly.finish(turn)

    # -- drops and resumes -------------------------------------------------------------------

    def _connection_lost(self, h: ConnectionLost) -> None:
        """The socket went away without our asking: record the drop on the turn in flight
        (the connection resumes by itself), or end the run when it cannot resume."""
        run = self.run
        if h.resuming:
            self.begin_resume(run.in_flight(), h.recv_ns, automatic=True)
            return
        pending = self._automatic_pending()
        if pending is not None:
            conn = run.conn
            record = conn.timings.resumes[-1] if conn is not None and conn.timings.resumes else None
            outcome = record.outcome if record is not None and record.outcome else "failed"
            pending.times.outcome = outcome if outcome != "resumed" else "failed"
        run.problems.append(f"connection lost: {h.reason}")
        run.ended_by = run.ended_by or f"connection lost: {h.reason}"
        run.ended.set()

    def begin_resume(self, turn: LiveTurn | None, t_drop: int, *, automatic: bool) -> PendingResume:
        """Open the record of one drop (and of its resume, pending) on ``turn``."""
        run = self.run
        cs = run.session
        if run.commits is not None:
            run.commits.dropped()
        r = PendingResume(
            ResumeTimes(t_drop=t_drop, automatic=automatic),
            dups_before=cs.duplicates_dropped,
            gaps_before=cs.seq_gaps,
        )
        if run.resumes:  # the previous resume's counting window ends here
            prev = run.resumes[-1][1]
            prev.dups_after, prev.gaps_after = cs.duplicates_dropped, cs.seq_gaps
        run.resumes.append((turn, r))
        if turn is not None:
            turn.times.resumes.append(r.times)
        run.report_dirty = True
        return r

    def _automatic_pending(self) -> PendingResume | None:
        run = self.run
        if not run.resumes:
            return None
        r = run.resumes[-1][1]
        return r if r.times.automatic and r.times.outcome == "pending" else None

    def _decided(self, verdicts: Verdicts[LiveTurn | None]) -> None:
        """Send what the commit ledger says is owed; end the turns it says are lost."""
        run = self.run
        commits = run.commits
        assert commits is not None
        if verdicts.barrier is not None:
            run.send_soon(verdicts.barrier)
        for turn, response_create in verdicts.resend:
            if turn is not None and (turn.finished.is_set() or turn.response_id is not None):
                continue
            event = run.session.commit(response_create=response_create)
            commits.resent(turn, event)
            run.send_soon(event)
            if run.artifacts is not None:
                index = None if turn is None else turn.index
                run.artifacts.note(now_ns(), "commit.resent", turn=index)
        for turn, why in verdicts.lost:
            if turn is not None:
                self.assembly.give_up(turn, f"lost at the drop: {why}", code=LOST_AT_DROP)

    def _after_resume(self, h: SessionResumed) -> None:
        """Any resume (scripted or the server's): what its session object says the server
        never received is owed again — the final playback ack, the commits."""
        run = self.run
        duty = self.playback.duty
        if duty is not None:
            duty.resumed(h.session)
        if run.commits is not None:
            self._decided(run.commits.resumed())

    def _resumed(self, h: SessionResumed) -> None:
        """An automatic resume succeeded: complete its record from the connection's."""
        self._after_resume(h)
        pending = self._automatic_pending()
        conn = self.run.conn
        if pending is None or conn is None or not conn.timings.resumes:
            return
        record = conn.timings.resumes[-1]
        rt = pending.times
        rt.outcome = "resumed"
        rt.t_resumed = h.recv_ns
        if record.reconnect_ms is not None:
            rt.t_open = record.t_drop_ns + int(record.reconnect_ms * NS_PER_MS)
        if record.resume_handshake_ms is not None:
            rt.t_resume_sent = h.recv_ns - int(record.resume_handshake_ms * NS_PER_MS)
        rt.t_drop = record.t_drop_ns
        if self.run.progress is not None and self.run.headless is None:
            turn = self.run.resumes[-1][0]
            where = f" during turn {turn.index}" if turn is not None else ""
            took = (h.recv_ns - rt.t_drop) / NS_PER_MS
            self.run.progress(f"the server dropped the connection{where}; resumed in {took:.0f} ms")

    def _count_burst(self, h: Happening) -> None:
        r = self.run.resumes[-1][1]
        if isinstance(h, SessionResumed):
            r.burst_last_ns = h.recv_ns
        elif h.seq is not None and r.burst_last_ns is not None:
            if h.recv_ns - r.burst_last_ns <= BURST_GAP_NS:
                r.burst += 1
                r.burst_last_ns = h.recv_ns
            else:
                r.burst_last_ns = None
