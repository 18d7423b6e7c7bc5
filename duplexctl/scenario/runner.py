"""Runs a :class:`~duplexctl.scenario.model.Scenario` over a live duplex session.

:class:`Replay` is the run's composition root; each job is its own small part, all sharing
one :class:`~duplexctl.scenario.state.RunState` (docs/architecture.md: replay; data flows
one way):

* the **microphone** (:mod:`~duplexctl.scenario.microphone`): appends on the pacer's
  absolute schedule, stamps each turn's reference points from the send of the append that
  carries them, commits, and sends a barge-in's explicit interrupt;
* the **listener** (:mod:`~duplexctl.scenario.listener`), called by the connection at
  receive time: responses onto turns, audio onto playback clocks, stop signals, errors, and
  every drop and resume (the server's own too, issue 17.4);
* the **playback** (:mod:`~duplexctl.scenario.playback`): one clock per answer, feeding the
  :class:`~duplexctl.protocol.playback_duty.PlaybackDuty` that decides every
  ``playback.ack``, truncate and ``session.event_ack`` — the same duty ``talk`` uses;
* the **ticker** (:mod:`~duplexctl.scenario.ticker`): the interactive run's timer — sends
  what is owed, writes heard audio, refreshes progress lines and report.json;
* the **step interpreter** (:mod:`~duplexctl.scenario.steps`): queues speech, waits, injects
  commits, barge-ins, cancels and drops at exact offsets;
* the **turn assembly** (:mod:`~duplexctl.scenario.assembly`): decides when a turn is over —
  an unanswered one is an error, never silence (issue 16.1) — and completes its raw times;
* the **report** (:mod:`~duplexctl.scenario.results`): report.json, expectations (steps
  never reached are "not reached", issue 17.6) and the exit code.

The runner keeps raw timestamps; :mod:`duplexctl.report.turns` turns them into figures.
Every exit path (end, Ctrl-C via ``stop``, server gone) closes the session with
``session.close`` and leaves complete artefacts.

**Headless** (:class:`Headless`, what ``load`` runs hundreds of in one process): the same
client core — same appends, marks, playback clocks, duty, turn times — without what only one
interactive session can afford: no artefacts, trace or progress lines unless ``out_dir``
asks for them; clips come decoded and appends come base64-encoded from caches shared by
every session; each finished turn goes to a callback as soon as its figures are final; and
there is no ticker task: the microphone, which wakes every ``chunk_ms`` anyway, sends what
is owed right after each append, so a session costs one timer, not two. A headless run
also does not wait for what cannot come: an interruption whose answer has already ended is
skipped (and counted), and a sequenced error that fails a turn ends that turn's wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from duplexctl.aio import cancel_and_wait
from duplexctl.audio.pacer import Pacer
from duplexctl.client.connection import ConnectionOptions, DuplexConnection, OpenFailed
from duplexctl.export.options import PushOptions
from duplexctl.prometheus.endpoints import ScrapeOptions
from duplexctl.protocol.commits import CommitLedger
from duplexctl.report.artifacts import RunArtifacts, write_report
from duplexctl.report.turns import TurnRecord
from duplexctl.scenario.assembly import TurnAssembly
from duplexctl.scenario.clips import SpokenClip, load_clips
from duplexctl.scenario.config import ReplayConfig, check_pauses
from duplexctl.scenario.listener import Listener
from duplexctl.scenario.microphone import ScriptedMicrophone
from duplexctl.scenario.model import Pace, Scenario, TurnEnd
from duplexctl.scenario.playback import ReplayPlayback
from duplexctl.scenario.results import ReplayReport, ReplayResult
from duplexctl.scenario.state import CLOSE_TIMEOUT_S, Headless, LiveTurn, PendingResume, RunState
from duplexctl.scenario.steps import StepInterpreter
from duplexctl.scenario.ticker import Ticker
from duplexctl.scenario.tools import ToolAnswerer

if TYPE_CHECKING:
    from duplexctl.export.live import Feed
    from duplexctl.export.state import ExportState

__all__ = ["Headless", "Replay", "ReplayResult", "load_clips", "run_replay"]


class Replay:
    """One run of one scenario (see the module docstring)."""

    def __init__(
        self,
        scenario: Scenario,
        config: ReplayConfig,
        url: str,
        *,
        api_key: str | None = None,
        out_dir: Path | None = None,
        progress: Callable[[str], None] | None = None,
        meta: dict[str, Any] | None = None,
        clips: dict[Path, SpokenClip] | None = None,
        headless: Headless | None = None,
    ) -> None:
        s = config.settings
        if clips is None:
            clips = load_clips(scenario, s.input_rate, s.input_format_canonical)
        self.scenario = scenario
        self.config = config
        self.url = url
        self.out_dir = out_dir
        self.headless = headless
        self._api_key = api_key
        run = self.state = RunState(
            scenario, config, url, headless, progress or (lambda _line: None)
        )
        run.meta = meta or {}
        self.assembly = TurnAssembly(run)
        self.playback = ReplayPlayback(run, self.assembly)
        self.listener = Listener(run, self.playback, self.assembly)
        self.tools = ToolAnswerer(run)
        self.listener.on_call = self.tools.on_call
        self.mic = ScriptedMicrophone(run, self.playback, self.assembly, clips)
        self.steps = StepInterpreter(
            run, self.mic, self.playback, self.listener, self.assembly, self.tools
        )
        self.report = ReplayReport(run, self.assembly, self.mic.pacer)

    # -- what load and the tests read ------------------------------------------------------

    @property
    def conn(self) -> DuplexConnection | None:
        return self.state.conn

    @property
    def pacer(self) -> Pacer:
        return self.mic.pacer

    @property
    def turns(self) -> list[LiveTurn]:
        return self.state.turns

    @property
    def resumes(self) -> list[tuple[LiveTurn | None, PendingResume]]:
        return self.state.resumes

    @property
    def errors(self) -> list[dict[str, Any]]:
        return self.state.errors

    @property
    def problems(self) -> list[str]:
        return self.state.problems

    @property
    def skipped_appends(self) -> int:
        return self.state.skipped_appends

    @property
    def unanswered_interruptions(self) -> int:
        return self.state.unanswered_interruptions

    @property
    def completed(self) -> bool:
        return self.state.completed

    @property
    def steps_begun(self) -> int:
        return self.state.steps_begun

    @property
    def ended_by(self) -> str | None:
        return self.state.ended_by

    @property
    def interrupted(self) -> bool:
        """The run was stopped (the ``stop`` event, or Ctrl-C) before its steps were done."""
        return self.state.interrupted

    @property
    def unreported_turns(self) -> int:
        """Headless: turns never handed to ``on_turn`` (cut by the end of the session)."""
        return self.assembly.unreported_turns

    def records(self) -> list[TurnRecord]:
        """Every turn's figures as of now."""
        return self.assembly.records()

    def export_state(self, running: bool) -> ExportState:
        """What ``--prometheus-rw`` pushes of this run now (docs/metrics.md "Remote write")."""
        from duplexctl.export.state import of_replay

        report = self.report.build()
        return of_replay(report, self.pacer.lag.values(), active=running and self.conn is not None)

    # -- the run -----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> ReplayResult:
        """Open, play every step, close; returns the result (raises OpenFailed on open)."""
        await self.drive(stop)
        result = self.report.result()
        self._finish_artifacts(report=result.report)
        return result

    async def drive(self, stop: asyncio.Event | None = None) -> None:
        """Open, play every step, close (raises OpenFailed on open); builds no report, so
        a headless session reads what it needs from the runner instead."""
        run = self.state
        s = self.config.settings
        headless = self.headless
        if self.out_dir is not None:
            loop = asyncio.get_running_loop()

            def write_failed() -> None:  # from any thread (the scraper's too)
                loop.call_soon_threadsafe(self._write_failed)

            run.writes.on_failure(write_failed)
            run.artifacts = RunArtifacts(
                self.out_dir,
                origin_ns=run.origin_ns,
                user_rate=s.input_rate,
                conversation_rate=s.output_rate,
                writes=run.writes,
            )
        close_timeout = CLOSE_TIMEOUT_S if headless is None else headless.close_timeout_s
        options = ConnectionOptions(
            heartbeat_s=None,  # the microphone never stops sending
            ack_interval_s=3600.0,  # no maintenance wake-ups: nothing for it to do
            event_acks=False,  # session.event_ack is the playback duty's (and traced)
            auto_resume=True,
            close_timeout_s=close_timeout,
        )
        open_timeout = max(10.0, self.config.response_timeout_s)
        if headless is not None:
            open_timeout = options.open_timeout_s = headless.open_timeout_s
            options.resume_attempts = headless.resume_attempts
            options.queue_happenings = False  # listener only: memory stays flat
        try:
            run.conn = await DuplexConnection.open(
                self.url,
                s,
                api_key=self._api_key,
                timeout=open_timeout,
                options=options,
                listeners=[self.listener.on_happening],
                give_up=stop,  # a stop while opening ends the wait at once
            )
        except OpenFailed as exc:
            if exc.gave_up and headless is None:  # Ctrl-C while opening: interrupted (130)
                run.interrupted, run.status = True, "interrupted"
                self.listener.flush_open_log()
                return
            run.status = "open_failed"
            self.listener.flush_open_log()
            self._finish_artifacts(error=str(exc), admission=exc.admission, cause=str(exc.cause))
            raise
        except BaseException:
            self._finish_artifacts(error="interrupted while opening")
            raise
        conn = run.conn
        if self.config.end_mode is TurnEnd.COMMIT and self.config.run["turn_detection"] == "none":
            run.commits = CommitLedger(conn.session)  # the client alone commits: pairable
        self.listener.flush_open_log()
        self.playback.start()
        if headless is not None and headless.on_open is not None:
            headless.on_open(conn)
        tasks = [asyncio.create_task(self.mic.loop(), name="replay-mic")]
        ticker: Ticker | None = None
        if headless is None:
            ticker = Ticker(run, self.playback, self.assembly, self.report.build)
            tasks.append(asyncio.create_task(ticker.loop(), name="replay-ticker"))
        steps = asyncio.create_task(self.steps.run_steps(), name="replay-steps")
        cancelled = False
        waiters = {steps, asyncio.create_task(run.ended.wait())}
        if stop is not None:
            waiters.add(asyncio.create_task(stop.wait()))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if not steps.done():
                if run.writes.failure is not None:
                    run.problems.append(str(run.writes.failure))
                elif stop is not None and stop.is_set():
                    run.interrupted = True
                else:
                    run.problems.append("the session ended before the scenario did")
            elif steps.exception() is not None:
                raise steps.exception()  # type: ignore[misc]
            else:
                run.completed = True
        except asyncio.CancelledError:
            run.interrupted = True  # Ctrl-C without a stop event: still close and save
            cancelled = True
        finally:
            await cancel_and_wait(*waiters, *tasks)
            self.mic.close()
            if not cancelled:
                with contextlib.suppress(asyncio.CancelledError):
                    await drain_frames(conn)
            await self.tools.close()
            run.closing = True
            run.cancel_background()
            with contextlib.suppress(asyncio.CancelledError):  # Ctrl-C again: still saved
                await asyncio.shield(conn.close(timeout=close_timeout))
            t_close = conn.timings.t_close_sent_ns
            if run.artifacts is not None and t_close is not None:  # sent by the connection
                close_event = {"type": "session.close", "reason": "client_close"}
                run.artifacts.event("send", t_close, close_event)
            self.playback.flush_heard()
            self.tools.finish()  # a tool call nothing answered is an error of the run
            if ticker is not None:
                ticker.print_finished_turns()  # a turn that finished on the last tick
            run.status = (
                "write_failed"
                if run.writes.failure is not None
                else "interrupted"
                if run.interrupted
                else "finished"
            )

    def _write_failed(self) -> None:
        """A file of ``--out`` could not be written: the run stops (its session is closed as
        on every exit path) and ends with the write failure (exit 4)."""
        run = self.state
        run.ended_by = run.ended_by or str(run.writes.failure)
        run.ended.set()

    def _finish_artifacts(
        self,
        *,
        report: dict[str, Any] | None = None,
        error: str | None = None,
        admission: str | None = None,
        cause: str | None = None,
    ) -> None:
        artifacts = self.state.artifacts
        if artifacts is None:
            return
        if report is None:
            report = self.report.build()
            report["error"] = error
            if admission is not None:  # the session was never opened: say why, as load does
                report["admission"], report["cause"] = admission, cause
        artifacts.write_report(report)
        artifacts.close()
        writes = self.state.writes
        if self.state.timeline is not None and self.config.pace is Pace.REALTIME and writes.ok:
            try:
                self.report.export_full_duplex_bench(artifacts.dir)
            except OSError as exc:
                writes.failed(artifacts.dir / "full_duplex_bench", exc)
        from duplexctl.report.html import replay_page

        replay_page.write(artifacts.dir, writes)


#: the longest a frame-locked session waits for the packets of its last frames at its end
FRAME_DRAIN_MAX_S = 5.0
#: ... and the longest it waits for the next one: none for this long, the rest is not coming
FRAME_DRAIN_IDLE_S = 1.0


async def drain_frames(conn: DuplexConnection) -> None:
    """On a frame-locked lane the packets of the last frames sent are still in the server's
    pipeline (its time to first audio) when the microphone stops: wait for them, so that the
    deficit at the end of the call counts frames the server never answered, not frames in
    flight (docs/metrics.md "Frame accounting"). Bounded: :data:`FRAME_DRAIN_MAX_S` in all,
    :data:`FRAME_DRAIN_IDLE_S` without a packet."""
    frames = conn.session.frames
    if frames is None:
        return
    loop = asyncio.get_running_loop()
    start = idle_since = loop.time()
    seen = frames.frames_received
    while conn.connected and not frames.balanced:
        now = loop.time()
        if frames.frames_received != seen:
            seen, idle_since = frames.frames_received, now
        if now - start >= FRAME_DRAIN_MAX_S or now - idle_since >= FRAME_DRAIN_IDLE_S:
            return
        await asyncio.sleep(frames.frame_ms / 4000)


async def run_replay(
    scenario: Scenario,
    config: ReplayConfig,
    url: str | None,
    *,
    api_key: str | None = None,
    out_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    handle_sigint: bool = False,
    scrape: ScrapeOptions | None = None,
    push: PushOptions | None = None,
    server_settings: Mapping[str, Any] | None = None,
    suite_feed: tuple[Feed, int] | None = None,
) -> ReplayResult:
    """The ``replay`` command's body: embedded server when no URL, Ctrl-C = stop and save.

    Audio is decoded before anything is started (bad input must not cost a server start).
    With ``handle_sigint`` the first Ctrl-C (or SIGTERM: a service manager stopping the run)
    sets a stop flag: the run stops, closes the session with ``session.close``, writes what it
    has, and returns ``interrupted``; a second Ctrl-C is the usual KeyboardInterrupt.
    ``suite_feed`` (a suite's one ``--prometheus-rw`` feed and this scenario's index in it)
    pushes this scenario's figures into the suite's run instead of one of its own.
    """
    from duplexctl.errors import STOP_SIGNALS

    say = progress or (lambda _line: None)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        stop.set()
        loop.remove_signal_handler(signum)

    settings = config.settings
    check_pauses(scenario, config)
    clips = load_clips(scenario, settings.input_rate, settings.input_format_canonical)
    for clip in clips.values():
        if clip.clip.conversion:
            say(clip.clip.conversion)
    if handle_sigint:
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, on_signal, signum)
    try:
        from duplexctl.client.target import (
            missing_behaviour,
            server_target,
            stop_latency_note,
            tls_for,
        )
        from duplexctl.export.live import following, pushing
        from duplexctl.prometheus.run import scraping, section

        async with server_target(url, server_settings) as target:
            if target.line:
                say(target.line)
            replay = Replay(
                scenario,
                config,
                target.url,
                api_key=api_key,
                out_dir=out_dir,
                progress=say,
                meta={"embedded_server": True} if target.embedded else None,
                clips=clips,
            )
            own_push = push if suite_feed is None else None
            async with (
                pushing(own_push, command="replay", target=target.url) as own_feed,
                following(
                    own_feed if suite_feed is None else suite_feed[0],
                    replay.export_state,
                    source=0 if suite_feed is None else suite_feed[1],
                ),
                scraping(
                    scrape,
                    target.url,
                    api_key=api_key,
                    out=out_dir,
                    ssl_context=tls_for(target.url),
                    writes=replay.state.writes,
                ) as scraper,
            ):
                result = await replay.run(stop)
            rewrite = False
            if own_feed is not None:  # --prometheus-rw: what the pushes did
                result.report["prometheus_remote_write"] = own_feed.summary()
                rewrite = True
            if scraper is not None:  # the server's side of the run (docs/metrics.md)
                scraper.release_held()
                result.report["server_metrics"] = section(scraper)
                assert scrape is not None  # a scraper exists only when scraping was asked
                result.report.setdefault("config", {}).update(scrape.echo())
                rewrite = True
            why = missing_behaviour(target, scenario.needs_behaviour)
            if why is not None and result.failed_expectations:
                # a failure the default model is bound to: say so, and how to turn it on
                for failed in result.failed_expectations:
                    failed["why"] = why
                result.report["needs_behaviour"] = {
                    "spec": scenario.needs_behaviour,
                    "missing": why,
                }
                rewrite = True
            behaviour = result.report.get("behaviour")
            if behaviour and behaviour.get("stop_latency_ms") is not None:
                sent_in_full = any(
                    t.get("reason") == "stop" and "heard_stop_ms" in (t.get("figures") or {})
                    for t in result.report.get("turns") or []
                )
                note = stop_latency_note(
                    target, behaviour["stop_latency_ms"], sent_in_full=sent_in_full
                )
                if note is not None:  # larger than configured: say why (the output unit)
                    behaviour.setdefault("notes", {})["stop_latency_ms"] = note
                    rewrite = True
            writes = replay.state.writes
            if rewrite and out_dir is not None:
                from duplexctl.report.html import replay_page

                write_report(out_dir, result.report, writes)
                replay_page.write(out_dir, writes)  # the page says what report.json now says
            result.write_failure = writes.failure
            return result
    finally:
        if handle_sigint:
            for signum in STOP_SIGNALS:
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(signum)
