"""A load session is the replay runner, headless, plus load's own bookkeeping.

``--mix`` behaviours become scenario steps of the session's own copy of the scenario, and a
session run against an in-process reference server (real loopback websockets, a few seconds
of real-time audio) reports admission, each turn once, send lags and audio to its sink.
What the shared runner sends under load is checked in ``test_scenario_headless.py``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from duplexctl.load.config import Mix
from duplexctl.load.script import AppendCache, build_script
from duplexctl.load.session import LoadSession, SessionRecord, Sink, with_mix
from duplexctl.report.turns import TurnRecord, TurnTimes
from duplexctl.scenario.config import CliOptions, resolve
from duplexctl.scenario.model import BargeIn, Cancel, Drop, Say, Wait
from duplexctl.server.app import start_server
from duplexctl.server.config import Fault, ServerConfig

RECORDINGS = Path(__file__).resolve().parent.parent / "recordings"
SHORT = RECORDINGS / "short_ack.wav"

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(120)]


def _server(**kw: Any) -> ServerConfig:
    return ServerConfig(host="127.0.0.1", port=0, reply_seconds=1.4, chunk_ms=200, **kw)


class ListSink(Sink):
    def __init__(self) -> None:
        self.turns: list[tuple[TurnRecord, TurnTimes]] = []
        self.finished: list[SessionRecord] = []
        self.admitted: list[dict[str, Any]] = []
        self.lags: list[float] = []
        self.audio_ms = 0.0

    def turn(self, record: TurnRecord, times: TurnTimes, session: SessionRecord) -> None:
        self.turns.append((record, times))

    def send_lag(self, t: float, lag_ms: float) -> None:
        self.lags.append(lag_ms)

    def audio(self, t: float, audio_ms: float) -> None:
        self.audio_ms += audio_ms

    def session_admitted(self, record: SessionRecord, capabilities: dict[str, Any]) -> None:
        self.admitted.append(capabilities)

    def session_finished(self, record: SessionRecord) -> None:
        self.finished.append(record)


def test_mix_is_written_into_the_sessions_own_scenario() -> None:
    script = build_script([str(SHORT), str(SHORT), str(SHORT)])
    picks = ["barge_in", None, "drop_resume"]
    mixed, begins = with_mix(script.scenario, picks, script.interrupt_path)
    kinds = [type(s) for s in mixed.steps]
    assert kinds == [Say, BargeIn, Wait, Say, Wait, Say, Drop, Wait]
    assert begins == [None, "barge_in", None, None, None, None, "drop_resume", None]
    barge = mixed.steps[1]
    assert isinstance(barge, BargeIn) and barge.file == script.interrupt_path
    assert script.interrupt_path in script.clips
    cancel, _ = with_mix(script.scenario, ["cancel"], script.interrupt_path)
    assert isinstance(cancel.steps[1], Cancel) and isinstance(cancel.steps[2], Wait)
    kept = [s for s in mixed.steps if not isinstance(s, BargeIn | Drop)]
    assert kept == list(script.scenario.steps)


async def _one_session(
    files: list[str], mix: str, sink: ListSink, server: ServerConfig
) -> SessionRecord:
    """One LoadSession of ``files`` (commit lane) against an in-process server."""
    script = build_script(files)
    config = resolve(CliOptions(turn_detection="none"), script.scenario.settings)
    async with await start_server(server) as srv:
        session = LoadSession(
            url=srv.url,
            config=config,
            script=script,
            record=SessionRecord(worker=0, index=0, attempt=1),
            sink=sink,
            mix=Mix.parse(mix),
            rng=random.Random(1),
            appends=AppendCache(),
        )
        return await session.run()


async def test_load_session_speaks_through_the_runner_and_records_itself() -> None:
    sink = ListSink()
    rec = await _one_session([str(SHORT)], "cancel=1", sink, _server())
    assert sink.finished == [rec] and len(sink.admitted) == 1
    assert rec.admission == "admitted" and rec.closed_cleanly
    assert rec.end_reason == "script_done"
    assert rec.behaviours == {"cancel": 1}
    assert rec.turns == 1 and rec.turns_cut == 0
    assert rec.appends == len(sink.lags) > 0
    assert not rec.violations
    [(record, times)] = sink.turns
    assert record.outcome == "cancelled" and times.barge is not None
    assert {"cancel_ack_ms", "heard_ms", "heard_stop_ms"} <= set(record.figures)
    assert sink.audio_ms == pytest.approx(record.figures["audio_ms"].value)


async def test_load_session_records_the_servers_drops_for_the_load_report() -> None:
    """The fields load's summary and --slo read (issue 17.4): drops, resumes, resume_ms,
    and the per-turn drops/resumes figures, against a server that drops every connection."""
    sink = ListSink()
    server = _server(faults=[Fault("drop-after", 23.0)])
    rec = await _one_session([str(SHORT), str(SHORT)], "", sink, server)
    assert rec.drops >= 1 and rec.resumes == rec.drops
    assert len(rec.resume_ms) == rec.resumes and min(rec.resume_ms) > 0
    assert rec.to_json(0.0)["drops"] == rec.drops
    turn_drops = sum(r.value("drops") for r, _times in sink.turns)
    assert turn_drops == rec.drops
    assert all(r.outcome == "spoke" or r.reason for r, _times in sink.turns)
