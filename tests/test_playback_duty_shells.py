"""replay (and load, its headless form) and talk owe the server the same frames.

Both shells are driven through the same timeline — the same server frames received at the
same times, the same playback (a simulated clock with the same prebuffer), the same
interruption — on a fake clock and a connection that records what is sent instead of
writing it. Whatever each shell decides on its own (turns, views, recordings), what it
sends on the playback's behalf comes from the one PlaybackDuty, so the frames must be equal
(event ids aside). Before the duty, replay acked unconditionally and never acked the heard
position before a cancel, talk did both its own way: these timelines told them apart.
"""

from __future__ import annotations

import base64
import io
import types
from pathlib import Path
from typing import Any

import pytest

import duplexctl.scenario.state as replay_state
import duplexctl.talk.output as talk_output
import duplexctl.talk.session as talk_session
from duplexctl.protocol.client_state import ClientSession
from duplexctl.protocol.playback_duty import PlaybackDuty
from duplexctl.scenario.config import CliOptions, resolve
from duplexctl.scenario.parse import from_audio_files
from duplexctl.scenario.runner import Replay
from duplexctl.talk.config import TalkConfig
from duplexctl.talk.output import SimulatedOutput
from duplexctl.talk.session import TalkSession
from duplexctl.talk.view import PlainView

RECORDINGS = Path(__file__).resolve().parent.parent / "recordings"
SID = "duplex-" + "c" * 32
RID = f"resp-{SID}-0-0000beef"
PREBUFFER_MS = 100.0


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def monotonic(self) -> float:
        return self.t

    def monotonic_ns(self) -> int:
        return round(self.t * 1e9)


class RecordingConnection:
    """What the shells use of a DuplexConnection, recording sends."""

    def __init__(self, clock: FakeClock) -> None:
        self.session = ClientSession()
        self.clock = clock
        self.sent: list[dict[str, Any]] = []
        self.connected = True

    async def send(self, event: dict[str, Any]) -> int:
        self.sent.append(event)
        return self.clock.monotonic_ns()

    def frames(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k != "event_id"} for e in self.sent]


def created(caps: dict[str, Any]) -> dict[str, Any]:
    return {"type": "session.created", "session": {"id": SID, "capabilities": caps}}


def delta(ms: float) -> dict[str, Any]:
    pcm = b"\0\0" * int(24 * ms)
    return {
        "type": "response.output_audio.delta",
        "response_id": RID,
        "delta": base64.b64encode(pcm).decode(),
        "format": "pcm16",
        "sample_rate_hz": 24000,
    }


def done(status: str) -> dict[str, Any]:
    return {"type": "response.done", "response": {"id": RID, "status": status}}


class ReplayShell:
    def __init__(self, clock: FakeClock) -> None:
        scenario = from_audio_files([RECORDINGS / "short_ack.wav"])
        config = resolve(CliOptions(prebuffer_ms=PREBUFFER_MS), scenario.settings)
        self.runner = Replay(scenario, config, "ws://127.0.0.1:9/v1/realtime")
        self.conn = RecordingConnection(clock)
        self.runner.state.conn = self.conn  # type: ignore[assignment]

    def opened(self) -> None:
        self.runner.playback.start()

    async def receive(self, frame: dict[str, Any], t_ns: int) -> None:
        for h in self.conn.session.on_frame(frame, t_ns):
            self.runner.listener.on_happening(h)

    async def tick(self, now: float) -> None:
        await self.runner.playback.send_owed(now)

    async def cancel(self) -> None:
        turn = self.runner.state.by_response[RID]
        event = self.conn.session.response_cancel(RID)
        await self.runner.playback.stop_listening(turn, event)


class TalkShell:
    def __init__(self, clock: FakeClock) -> None:
        self.talk = TalkSession(
            TalkConfig(prebuffer_ms=PREBUFFER_MS, output_device="none"),
            PlainView(io.StringIO()),
        )
        self.conn = RecordingConnection(clock)
        talk = self.talk
        talk.conn = self.conn  # type: ignore[assignment]
        talk.output = SimulatedOutput(24000, prebuffer_ms=PREBUFFER_MS, on_started=talk._on_started)

    def opened(self) -> None:
        self.talk.duty = PlaybackDuty(
            self.conn.session, ack_every_ms=self.talk.config.ack_interval_ms
        )

    async def receive(self, frame: dict[str, Any], t_ns: int) -> None:
        for h in self.conn.session.on_frame(frame, t_ns):
            await self.talk._on_happening(h)

    async def tick(self, now: float) -> None:
        await self.talk._service(now)

    async def cancel(self) -> None:
        await self.talk._interrupt("key")


async def drive(
    shell: ReplayShell | TalkShell,
    clock: FakeClock,
    timeline: list[tuple[float, str, Any]],
) -> list[dict[str, Any]]:
    """Play ``timeline`` ((t, what, arg): frame / tick / cancel) through ``shell``."""
    seq = 0
    for t, what, arg in timeline:
        clock.t = t
        if what == "frame":
            frame = dict(arg)
            if frame["type"] != "session.created":
                seq += 1
                frame["server_event_seq"] = seq
            await shell.receive(frame, clock.monotonic_ns())
            if frame["type"] == "session.created":
                shell.opened()
        elif what == "tick":
            await shell.tick(t)
        else:
            await shell.cancel()
    return shell.conn.frames()


BARGE_IN = {
    "type": "overlap.decision",
    "epoch": 0,
    "action": "barge_in",
    "metadata": {"reason": "server_vad_speech_started", "cancel_reason": "turn_detected"},
}


def timeline(
    caps: dict[str, Any], *, cancel_at: float | None, by: str = "user", done_after: float = 0.004
) -> list[tuple[float, str, Any]]:
    """A 1 s reply in five 200 ms chunks (50 ms apart), played on a 100 ms prebuffer,
    ticks every 30 ms; optionally interrupted mid-reply at ``cancel_at``: by the user's
    cancel, by the server's decision that the user barged in (``by="server"``), or by the
    server cancelling the response alone (``by="done"``); the cancelled response.done comes
    ``done_after`` s later."""
    events: list[tuple[float, str, Any]] = [(100.0, "frame", created(caps))]
    events.append((100.01, "frame", {"type": "response.created", "response": {"id": RID}}))
    for i in range(5):
        events.append((100.3 + 0.05 * i, "frame", delta(200)))
    stop = 101.6
    if cancel_at is not None:
        if by == "user":
            events.append((cancel_at, "cancel", None))
        elif by == "server":
            events.append((cancel_at, "frame", BARGE_IN))
        events.append((cancel_at + done_after, "frame", done("cancelled")))
        stop = cancel_at + 0.3
    else:
        events.append((100.6, "frame", done("completed")))
    t = 100.0
    while t < stop:
        events.append((round(t, 6), "tick", None))
        t += 0.03
    events.sort(key=lambda e: (e[0], e[1] != "frame"))
    return events


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    fake_time = types.SimpleNamespace(monotonic=fake.monotonic, monotonic_ns=fake.monotonic_ns)
    for module in (replay_state, talk_output, talk_session):
        monkeypatch.setattr(module, "time", fake_time)
    return fake


CAPS = [
    {},
    {"supports_playback_ack": True, "supports_audio_truncate": True},
    {"supports_playback_ack": False, "supports_audio_truncate": True},
    {"supports_playback_ack": True, "supports_audio_truncate": False},
]


@pytest.mark.parametrize("caps", CAPS)
@pytest.mark.parametrize("cancel_at", [None, 100.65])
async def test_replay_and_talk_send_the_same_frames(
    clock: FakeClock, caps: dict[str, Any], cancel_at: float | None
) -> None:
    line = timeline(caps, cancel_at=cancel_at)
    replay_frames = await drive(ReplayShell(clock), clock, line)
    talk_frames = await drive(TalkShell(clock), clock, line)
    assert replay_frames == talk_frames
    acks = [f for f in replay_frames if f["type"] == "playback.ack"]
    truncates = [f for f in replay_frames if f["type"] == "conversation.item.truncate"]
    if caps.get("supports_playback_ack") is False:
        assert acks == []
    else:
        assert acks[0]["played_ms"] == 0 and acks[0]["item_id"] == f"item_{RID}"
    if cancel_at is None:
        assert truncates == []
        if acks:
            assert acks[-1]["played_ms"] == 1000  # the final exact ack
    else:
        # the heard position: 100 ms into playback (P0 = 100.4, cancel at 100.65 → 250 ms)
        cancel = next(i for i, f in enumerate(replay_frames) if f["type"] == "response.cancel")
        if acks:
            assert replay_frames[cancel - 1]["type"] == "playback.ack"
            assert replay_frames[cancel - 1]["played_ms"] == 250
        if caps.get("supports_audio_truncate") is False:
            assert truncates == []
        else:
            assert [(f["item_id"], f["audio_end_ms"]) for f in truncates] == [(f"item_{RID}", 250)]
    assert any(f["type"] == "session.event_ack" for f in replay_frames)


@pytest.mark.parametrize("caps", CAPS[:2])
@pytest.mark.parametrize(
    ("by", "heard_ms"),
    [("server", 250), ("done", 400)],  # stopped at the decision (100.65), or at the done (100.8)
)
async def test_a_server_signal_stops_playback_the_same_way_in_replay_and_talk(
    clock: FakeClock, caps: dict[str, Any], by: str, heard_ms: int
) -> None:
    """The server's barge-in decision stops playback at once, whichever shell plays it; the
    cancelled response.done 150 ms later finds it stopped (protocol/playback_stop.py). A
    cancel the server sends alone stops playback at the done."""
    line = timeline(caps, cancel_at=100.65, by=by, done_after=0.15)
    replay_frames = await drive(ReplayShell(clock), clock, line)
    talk_frames = await drive(TalkShell(clock), clock, line)
    assert replay_frames == talk_frames
    truncates = [f for f in replay_frames if f["type"] == "conversation.item.truncate"]
    if caps.get("supports_audio_truncate"):
        assert [(f["item_id"], f["audio_end_ms"]) for f in truncates] == [(f"item_{RID}", heard_ms)]
    assert not any(f["type"] == "response.cancel" for f in replay_frames)  # the server's doing
