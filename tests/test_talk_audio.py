"""``talk`` against a REAL sound server: the assistant's audio must come out of the device.

A private PulseAudio (tests/support/pulse.py) has a null sink whose monitor is the default source.
``talk`` plays into the sink through its Speaker; the test records the monitor with a second
:class:`Microphone`, so what is asserted is what a listener at the device would have heard:
the reference server's 440 Hz tone, for as long as the reply lasts — and, on a barge-in,
silence within 150 ms of the interrupting speech (the issue's requirement; printed).

The user side is ``--input-file`` (recordings/hello.wav, then interrupt.wav timed to land
while the reply plays), fed through the same live path as a microphone. Timing bounds are
generous except the 150 ms barge-in figure, which is the requirement itself.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from duplexctl.audio import manifest
from duplexctl.report.turns import TurnRecord
from duplexctl.server.app import start_server
from duplexctl.server.config import ServerConfig
from duplexctl.talk.config import InputFileSpec, TalkConfig
from duplexctl.talk.session import TalkResult, TalkSession
from duplexctl.talk.view import PlainView

ROOT = Path(__file__).resolve().parent.parent
REC = ROOT / "recordings"
MIC_RATE = 16000
LOUD = 0.05  # the tone is ~0.5 peak; silence is digital zero

pytestmark = [pytest.mark.realtime, pytest.mark.audio, pytest.mark.usefixtures("pulse_server")]


class MonitorCapture:
    """Record the null sink's monitor in the background (sample times from t_capture)."""

    def __init__(self) -> None:
        from duplexctl.audio.devices import Microphone

        self.mic = Microphone(None, rate=MIC_RATE)  # default source = vsink.monitor
        self.blocks: list[Any] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> MonitorCapture:
        self.mic.start()
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        async for block in self.mic:
            self.blocks.append(block)

    async def __aexit__(self, *exc: object) -> None:
        self.mic.stop()
        assert self._task is not None
        await asyncio.wait_for(self._task, 5)

    def loud(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(samples, monotonic time of each sample, indices above LOUD)."""
        x = np.concatenate([b.samples for b in self.blocks])
        t = np.concatenate(
            [b.t_capture + np.arange(b.samples.size) / MIC_RATE for b in self.blocks]
        )
        return x, t, np.nonzero(np.abs(x) > LOUD)[0]


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.fft.rfftfreq(x.size, 1.0 / rate)[int(np.argmax(spectrum))])


async def talk_through_speaker(
    tmp_path: Path, server_config: ServerConfig, files: list[str], duration_s: float
) -> tuple[TalkSession, TalkResult, MonitorCapture]:
    server = await start_server(server_config)
    try:
        config = TalkConfig(
            url=server.url,
            input_files=[InputFileSpec.parse(str(REC / f)) for f in files],
            duration_s=duration_s,
            record_dir=tmp_path / "rec",
        )
        session = TalkSession(config, PlainView())
        async with MonitorCapture() as cap:
            await asyncio.sleep(0.3)
            result = await asyncio.wait_for(session.run(), duration_s + 30)
            await asyncio.sleep(0.3)
        assert server.registry.slots_held == 0  # session.close reached the server
    finally:
        await server.close()
    return session, result, cap


def first_turn(result: TalkResult) -> TurnRecord:
    assert result.turns, "no turn was recorded"
    return result.turns[0]


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
async def test_assistant_tone_comes_out_of_the_output_device(tmp_path: Path) -> None:
    """hello.wav in; the 2 s 440 Hz reply is captured back from the sink's monitor."""
    reply_s = 2.0
    config = ServerConfig(
        port=0, voice="tone", reply_seconds=reply_s, ttfa_ms=300, chunk_ms=200,
        model_profile="turn",
    )  # fmt: skip
    session, result, cap = await talk_through_speaker(tmp_path, config, ["hello.wav"], 8.0)

    assert result.error is None and not result.interrupted
    x, t, idx = cap.loud()
    assert idx.size, "nothing came out of the output device"
    span_s = (idx[-1] - idx[0]) / MIC_RATE
    freq = peak_hz(x[idx[0] : idx[-1]], MIC_RATE)
    turn = first_turn(result)
    figs = {k: v.value for k, v in turn.figures.items()}
    st = next(iter(session.responses.values()))
    p0 = st.turn.p0 / 1e9 if st.turn.p0 else None
    onset_vs_p0 = (t[idx[0]] - p0) * 1000.0 if p0 else float("nan")
    print(
        f"\ntalk tone: peak {freq:.1f} Hz, captured span {span_s * 1000:.0f} ms "
        f"(reply {reply_s * 1000:.0f} ms), ttfa_ms {figs.get('ttfa_ms')}, "
        f"first_audible_ms {figs.get('first_audible_ms')}, heard_ms {figs.get('heard_ms')}, "
        f"captured onset - P0 {onset_vs_p0:+.1f} ms"
    )
    assert abs(freq - 440.0) <= 10.0
    assert abs(span_s - reply_s) <= 0.2
    assert turn.outcome == "spoke" and turn.status == "completed"
    assert figs["heard_ms"] == pytest.approx(reply_s * 1000.0, abs=5.0)
    # VAD silence (800 ms) + the server's ttfa (300 ms) after the end of speech
    assert 900.0 <= figs["ttfa_ms"] <= 3000.0
    assert abs(onset_vs_p0) < 250.0  # P0 from the device clock matches what was heard

    rec = tmp_path / "rec"
    sent_acks = [
        e["event"]["played_ms"]
        for e in events(rec / "events.jsonl")
        if e["dir"] == "send" and e["type"] == "playback.ack"
    ]
    assert sent_acks[0] == 0 and sent_acks == sorted(sent_acks)
    assert sent_acks[-1] == int(reply_s * 1000)  # the final exact ack
    import soundfile as sf

    conv, rate = sf.read(str(rec / "conversation.wav"))
    assert conv.shape[1] == 2 and rate == 24000
    right = np.nonzero(np.abs(conv[:, 1]) > LOUD)[0]
    assert (right[-1] - right[0]) / rate == pytest.approx(reply_s, abs=0.1)  # heard channel
    left = np.nonzero(np.abs(conv[:, 0]) > LOUD)[0]
    assert left.size and left[0] < right[0]  # the user spoke first, on the same timeline


@pytest.mark.timing
async def test_barge_in_stops_playback_within_150_ms(tmp_path: Path) -> None:
    """interrupt.wav starts while the 4 s reply plays: the output goes silent within 150 ms
    of the interrupting speech, and the truncate carries the device-heard position."""
    interrupt_at_s = 5.7  # hello: speech ends 3.18 s; + 0.8 s VAD + 0.3 s ttfa -> reply ~4.3 s
    config = ServerConfig(
        port=0, voice="tone", reply_seconds=4.0, ttfa_ms=300, chunk_ms=200,
        model_profile="turn",
    )  # fmt: skip
    session, result, cap = await talk_through_speaker(
        tmp_path, config, ["hello.wav", f"interrupt.wav@{interrupt_at_s}"], 8.0
    )
    assert result.error is None
    entry = manifest.lookup(REC / "interrupt.wav")
    assert entry is not None and session.input_t0 is not None
    t_speech = session.input_t0 + interrupt_at_s + entry.speech_start_ms / 1000.0

    _, t, idx = cap.loud()
    assert idx.size, "nothing came out of the output device"
    assert np.any(t[idx] < t_speech), "the reply was not playing when the interruption began"
    played = idx[t[idx] < t_speech + 0.3]  # the interrupted reply, up to where it went silent
    t_silent = t[played[-1]] + 1.0 / MIC_RATE
    after_loud = idx[t[idx] >= t_speech + 0.3]
    stop_ms = (t_silent - t_speech) * 1000.0  # negative: silent before the measured onset
    barge = result.barge_ins[0]
    turn = first_turn(result)
    figs = {k: v.value for k, v in turn.figures.items()}
    heard = figs["heard_ms"]
    captured_ms = (played[-1] - played[0]) / MIC_RATE * 1000.0
    print(
        f"\ntalk barge-in: output silent {stop_ms:.1f} ms after the interrupting speech began "
        f"(local detector: flush {barge.local_stop_ms:.1f} ms after onset); heard_ms {heard}, "
        f"captured tone {captured_ms:.0f} ms, cancel_ack_ms {figs.get('cancel_ack_ms')}, "
        f"heard_stop_ms {figs.get('heard_stop_ms')}, outcome {turn.outcome} ({turn.reason})"
    )
    assert stop_ms < 150.0
    assert after_loud.size == 0, "the interrupted reply kept playing"
    assert turn.outcome == "cancelled" and turn.reason == "client_cancelled"
    assert barge.local_stop_ms is not None and barge.local_stop_ms < 150.0
    assert figs["cancel_ack_ms"] is not None  # t_bi resolved: the barge-in figures exist
    assert abs(captured_ms - heard) < 150.0  # the heard position is what came out

    # the server was told the device position, not the bytes received
    evs = events(tmp_path / "rec" / "events.jsonl")
    rid = turn.response_id
    truncates = [e for e in evs if e["dir"] == "send" and e["type"] == "conversation.item.truncate"]
    assert len(truncates) == 1
    assert truncates[0]["event"]["item_id"] == f"item_{rid}"
    assert truncates[0]["event"]["audio_end_ms"] == int(heard)
    echoed = [e for e in evs if e["dir"] == "recv" and e["type"] == "conversation.item.truncated"]
    assert echoed and echoed[0]["event"]["audio_end_ms"] == int(heard)
    acked = [
        e["event"]["event"]["played_ms"]
        for e in evs
        if e["dir"] == "recv" and e["type"] == "playback.acknowledged"
    ]
    assert int(heard) in acked  # the server's ledger took the heard position before cancel
    received_ms = session.conn.session.responses[rid].audio_ms if session.conn else 0.0
    assert heard < received_ms  # audio received but never played is not reported as heard
