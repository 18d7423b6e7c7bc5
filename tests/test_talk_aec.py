"""``talk --aec`` through a real echo path: a laptop's speaker heard by its own microphone.

A private PulseAudio (tests/support/pulse.py) gets :func:`add_echo_path`: ``talk``'s speaker sink is
fed back into the microphone source 50 ms late (54-64 ms measured) and 10 dB quieter, and the
user's voice (the bundled recordings, played by this test through a real output stream) goes
into the same source. The reference server answers with the ``echo`` voice: it says back what
it heard, so the assistant talks real speech through the speaker. What is measured:

* ERLE in steady state during assistant speech, from ``mic.wav`` (before cancellation) and
  ``user.wav`` (what the server received), sample-aligned: the median over 0.5 s stretches
  >= 25 dB (the issue's figure); the figure over all frames is printed (on a loaded machine
  speaker underruns make AEC3 lose the echo for moments, which dominate it);
* false barge-ins (the local detector, or the server's VAD, interrupting while the user is
  silent) over a 60 s conversation: 0 with ``--aec on``; with ``--aec off`` the same path
  triggers them;
* real user speech over the assistant stops the speaker, measured on the speaker sink's
  monitor from the DAC time of the user's speech onset: within ``STOP_BOUND_MS`` in every
  trial, and the issue's 150 ms as the median of ``STOP_TRIALS`` trials;
* added capture latency: the cleaned microphone's lag behind the raw one (cross-correlation
  over the user's speech) is AEC3's fixed block delay (7.9 ms at 16 kHz) and <= 10 ms; the
  per-block computing time on top is printed here and measured in bench/aec_cost.py.

The 60 s conversation is the one long test (~65 s); the whole module takes ~2 minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from support.pulse import MONITOR, EchoPath, add_echo_path, remove_echo_path

from duplexctl.audio import manifest
from duplexctl.server.app import start_server
from duplexctl.server.config import ServerConfig
from duplexctl.talk.config import TalkConfig
from duplexctl.talk.echo import MISSING_LINE, RENDER_LEAD_S, EchoCanceller, load_binding
from duplexctl.talk.inputs import InputBlock
from duplexctl.talk.session import TalkResult, TalkSession
from duplexctl.talk.view import PlainView

pytestmark = pytest.mark.realtime

ROOT = Path(__file__).resolve().parent.parent
REC = ROOT / "recordings"
RATE = 16000
LOUD = 0.01  # the speaker capture: speech peaks ~0.3; a silent null sink is digital zero
FRAME = RATE // 100
# The issue's stop figure, asserted as the median of STOP_TRIALS trials by
# test_stop_meets_the_issues_150_ms (measured 105-124 ms, median 108: the word's first ~55 ms
# is no louder than the echo + 6 dB, then a 32 ms onset, then the hard flush).
STOP_TARGET_MS = 150.0
STOP_TRIALS = 5
# What every trial must meet: the user's speech, not the echo, stops the assistant while the
# user is still saying their sentence (interrupt.wav speaks for 2.6 s).
STOP_BOUND_MS = 2000.0
# user utterances (file, seconds after talk's input started): each ends, the assistant says
# it back (~1.1 s later: 800 ms server VAD silence + 300 ms ttfa), and only then the next
CONVERSATION = [
    ("hello.wav", 0.5),
    ("followup.wav", 11.0),
    ("count.wav", 21.0),
    ("hello.wav", 35.5),
    ("followup.wav", 46.0),
]


def server_config() -> ServerConfig:
    return ServerConfig(
        port=0, voice="echo", ttfa_ms=300, chunk_ms=200, model_profile="turn",
    )  # fmt: skip


@contextlib.contextmanager
def routed(**env: str) -> Iterator[None]:
    """PULSE_SINK / PULSE_SOURCE for the streams opened inside (libpulse reads them then)."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def echo_path(pulse_daemon: Any) -> Iterator[EchoPath]:
    path = add_echo_path(pulse_daemon, delay_ms=50, gain_db=-10.0)
    yield path
    remove_echo_path(pulse_daemon, path)


@dataclass
class Conversation:
    session: TalkSession
    result: TalkResult
    record: Path
    heard: list[Any]  # CapturedBlocks of the speaker sink's monitor
    user: list[tuple[str, float]] = field(default_factory=list)  # (file, DAC time of sample 0)
    # script times: seconds after talk's input started; -x: x s after the first reply's P0

    def speaker(self) -> tuple[np.ndarray, np.ndarray]:
        x = np.concatenate([b.samples for b in self.heard])
        t = np.concatenate([b.t_capture + np.arange(b.samples.size) / RATE for b in self.heard])
        return x, t

    def speech_spans(self) -> list[tuple[float, float]]:
        """Monotonic (start, end) of each user utterance's speech, as it entered the room."""
        spans = []
        for name, t0 in self.user:
            entry = manifest.lookup(REC / name)
            assert entry is not None
            spans.append((t0 + entry.speech_start_ms / 1000, t0 + entry.speech_end_ms / 1000))
        return spans

    def false_barge_ins(self) -> list[float]:
        """Interruptions while the user was silent: the local detector's (onset in no user
        utterance +-0.3 s) and the server's (flushed more than 1.5 s from any utterance: its
        VAD is slower) - the assistant heard as the user."""
        spans = self.speech_spans()
        false = []
        for b in self.result.barge_ins:
            if b.kind == "speech" and b.onset is not None:
                t, before, after = b.onset.t_onset, 0.3, 0.3
            elif b.kind == "server":
                t, before, after = b.t_flush, 0.3, 1.5
            else:
                continue
            if not any(s - before <= t <= e + after for s, e in spans):
                false.append(t)
        return false


async def converse(
    tmp_path: Path, path: EchoPath, script: list[tuple[str, float]], duration_s: float, aec: str
) -> Conversation:
    """Run talk on the echo path while the user says ``script``; capture the speaker."""
    from duplexctl.audio.devices import Microphone, Speaker

    server = await start_server(server_config())
    heard: list[Any] = []
    with routed(PULSE_SOURCE=MONITOR):
        capture = Microphone(None, rate=RATE)
        capture.start()
    with routed(PULSE_SINK=path.voice):
        voice = Speaker(None, rate=RATE)
        voice.start()

    async def keep() -> None:
        async for block in capture:
            heard.append(block)

    keeper = asyncio.create_task(keep())
    record = tmp_path / f"rec-{aec}"
    conv: Conversation | None = None
    try:
        await asyncio.sleep(0.3)
        with routed(PULSE_SINK=path.speaker, PULSE_SOURCE=path.microphone):
            config = TalkConfig(url=server.url, duration_s=duration_s, record_dir=record, aec=aec)
            session = TalkSession(config, PlainView())
            talk = asyncio.create_task(session.run())
            for _ in range(200):  # talk's devices open within a few hundred ms
                if session.input_t0 is not None or talk.done():
                    break
                await asyncio.sleep(0.02)
        assert session.input_t0 is not None, "talk did not start its input"
        plays: list[tuple[str, str]] = []
        for k, (name, at_s) in enumerate(script):
            if at_s < 0:  # -x: x seconds after the assistant's first reply became audible
                while (
                    not session.responses or next(iter(session.responses.values())).turn.p0 is None
                ):
                    await asyncio.sleep(0.01)
                p0 = next(iter(session.responses.values())).turn.p0
                assert p0 is not None
                at_s = p0 / 1e9 - session.input_t0 - at_s
            await asyncio.sleep(max(0.0, session.input_t0 + at_s - time.monotonic()))
            samples, rate = sf.read(str(REC / name), dtype="float32")
            assert rate == RATE
            rid = f"user-{k}"
            voice.enqueue(rid, samples)
            voice.end_response(rid)
            plays.append((name, rid))
        result = await asyncio.wait_for(talk, duration_s + 30)
        conv = Conversation(session, result, record, heard)
        for name, rid in plays:
            started = voice.started_at(rid)
            assert started is not None, f"the user's {name} never played"
            conv.user.append((name, started))
        assert server.registry.slots_held == 0  # session.close reached the server
    finally:
        capture.stop()
        await asyncio.wait_for(keeper, 5)
        voice.close(wait_tail=False)
        await server.close()
    assert conv is not None
    return conv


@dataclass
class Erle:
    """Echo attenuation from mic.wav vs user.wav over the echo-only 10 ms frames."""

    steady_db: float  # median over 0.5 s stretches: what the canceller holds once converged
    overall_db: float  # all frames' energy: dominated by any moment it lost the echo
    seconds: float


def erle_during_assistant_speech(conv: Conversation, after_s: float) -> Erle:
    """Frames with echo (mic above -45 dBFS) at least ``after_s`` into talk's input, away
    from user speech."""
    mic, _ = sf.read(str(conv.record / "mic.wav"), dtype="float64")
    clean, _ = sf.read(str(conv.record / "user.wav"), dtype="float64")
    n = min(mic.size, clean.size) // FRAME
    assert n > 0 and abs(mic.size - clean.size) <= FRAME  # one timeline, sample for sample
    t0 = conv.session.input_t0
    assert t0 is not None
    mic_p = np.mean(mic[: n * FRAME].reshape(n, FRAME) ** 2, axis=1)
    clean_p = np.mean(clean[: n * FRAME].reshape(n, FRAME) ** 2, axis=1)
    t = t0 + np.arange(n) / 100.0
    keep = (mic_p > 10 ** (-45 / 10)) & (t >= t0 + after_s)
    for s, e in conv.speech_spans():
        keep &= ~((t >= s - 0.3) & (t <= e + 0.5))
    assert keep.sum() > 300, "less than 3 s of echo-only frames to measure"
    stretches = [
        10 * np.log10(mic_p[i : i + 50][m].sum() / max(clean_p[i : i + 50][m].sum(), 1e-15))
        for i in range(0, n, 50)
        if (m := keep[i : i + 50]).sum() >= 25
    ]
    overall = 10 * np.log10(mic_p[keep].sum() / max(clean_p[keep].sum(), 1e-15))
    return Erle(float(np.median(stretches)), float(overall), keep.sum() / 100)


def capture_lag_ms(conv: Conversation) -> float:
    """Lag of the cleaned microphone behind the raw one over the user's speech (ms)."""
    mic, _ = sf.read(str(conv.record / "mic.wav"), dtype="float64")
    clean, _ = sf.read(str(conv.record / "user.wav"), dtype="float64")
    t0 = conv.session.input_t0
    assert t0 is not None
    s, e = conv.speech_spans()[-1]
    a, b = int((s - t0) * RATE), int((e - t0) * RATE)
    x, y = mic[a:b], clean[a:b]
    lags = range(-160, 161)  # +-10 ms
    score = [float(np.dot(x[160:-160], y[160 + k : y.size - 160 + k])) for k in lags]
    return 1000.0 * lags[int(np.argmax(score))] / RATE


# --- through the real echo path ---------------------------------------------------------------


@pytest.mark.usefixtures("pulse_server")
@pytest.mark.audio
@pytest.mark.slow
async def test_sixty_second_conversation_on_speakers(tmp_path: Path, echo_path: EchoPath) -> None:
    """AEC on: ERLE >= 25 dB while the assistant talks, no false barge-in in 60 s, the server
    answers the user's words (not its own), the capture path is not delayed."""
    conv = await converse(tmp_path, echo_path, CONVERSATION, 60.0, "on")
    result = conv.result
    assert result.error is None
    erle = erle_during_assistant_speech(conv, after_s=10.0)
    echo = conv.session.echo
    assert echo is not None
    stats = echo.stats()
    lag = capture_lag_ms(conv)
    falses = conv.false_barge_ins()
    spoke = [t for t in result.turns if t.outcome == "spoke"]
    print(
        f"\naec on, 60 s: ERLE steady {erle.steady_db:.1f} dB, overall {erle.overall_db:.1f} dB "
        f"over {erle.seconds:.1f} s of assistant echo (talk's last figure {stats.erle_db:.1f} "
        f"dB, stream delay {stats.delay_ms:.0f} ms (median of 2 s), far end late on "
        f"{echo.far_late_frames} of {stats.frames} frames, devices "
        f"{stats.device_latency_ms:.0f} ms, "
        f"{echo.render_gaps} underruns/restarts, {echo.leaks_silenced} leak frames kept from "
        f"the detector); false barge-ins {len(falses)} of {len(result.barge_ins)} "
        f"({[b.kind for b in result.barge_ins]}); turns spoken {len(spoke)}/{len(result.turns)}; "
        f"capture lag {lag:+.2f} ms, added per block {stats.added_ms_mean:.2f} ms mean / "
        f"{stats.added_ms_max:.1f} ms worst; CPU {1000 * stats.cpu_s / echo.audio_s:.1f} ms "
        f"per s of audio"
    )
    assert erle.steady_db >= 25.0  # the issue's figure, in steady state
    assert falses == []  # the assistant never interrupted itself
    assert len(spoke) >= 3  # the conversation happened: the assistant answered, out loud
    # the cleaned signal lags by the module's own delay (measured at start), within 10 ms
    assert lag == pytest.approx(1000.0 * echo.module_delay_s, abs=0.5)
    assert 0.0 <= lag <= 10.0
    # the devices' latency as their clocks report it (the speaker's DAC lead + capture lag)
    assert 5.0 <= stats.device_latency_ms <= 500.0
    # the far end led by the clocks: the stream delay told, over the last 2 s (one frame's
    # may be 0 when the speaker's block came after the microphone's: CI ended on one)
    assert 0.0 < stats.delay_ms <= 1000 * RENDER_LEAD_S + 0.5
    assert echo.far_late_frames < stats.frames // 10  # and it came in time nearly always
    report = (conv.record / "report.json").read_text()
    assert '"aec"' in report and '"erle_db"' in report


@pytest.mark.usefixtures("pulse_server")
@pytest.mark.slow
@pytest.mark.audio
async def test_without_aec_the_same_path_barges_in_on_itself(
    tmp_path: Path, echo_path: EchoPath
) -> None:
    """Proof the echo path is real: with --aec off the assistant's voice, heard back by the
    microphone, triggers the local barge-in detector while the user is silent."""
    conv = await converse(tmp_path, echo_path, CONVERSATION[:2], 22.0, "off")
    falses = conv.false_barge_ins()
    print(
        f"\naec off, 22 s: false barge-ins {len(falses)} of {len(conv.result.barge_ins)} "
        f"barge-ins; turns {[t.outcome for t in conv.result.turns]}"
    )
    assert conv.session.echo is None and not (conv.record / "mic.wav").exists()
    assert len(falses) >= 1


async def stop_after_user_speech(tmp_path: Path, path: EchoPath) -> float:
    """One trial: interrupt.wav begins 1 s into the assistant saying hello back. Asserts
    what must hold every time (the user's speech, not the echo, stopped the reply, and none
    of it played on); returns the stop: ms from the user's speech onset (its DAC time) to
    the last loud sample on the speaker sink's monitor."""
    conv = await converse(tmp_path, path, [("hello.wav", 0.5), ("interrupt.wav", -1.0)], 10.0, "on")
    assert conv.result.error is None
    onset = conv.speech_spans()[1][0]
    x, t = conv.speaker()
    loud = np.abs(x) > LOUD
    # the reply says hello.wav back, whose "Hello there." is followed by a pause: a window
    # shorter than that pause could fall into it and miss a reply that was going on
    before = loud & (t >= onset - 1.0) & (t < onset)
    # a reply already stopped here was stopped by its own echo (a false barge-in: how the
    # leading-edge fault of test_the_first_replys_leading_edge_is_not_the_user showed)
    assert before.any(), "the assistant was not talking when the user interrupted"
    played = np.nonzero(loud & (t < onset + STOP_BOUND_MS / 1000))[0]
    stop_ms = float((t[played[-1]] - onset) * 1000.0)
    assert stop_ms > 0, "the reply ended before the user spoke: nothing to stop"
    after = loud & (t >= onset + STOP_BOUND_MS / 1000) & (t < onset + 3.0)
    barge = conv.result.barge_ins
    echo = conv.session.echo
    assert echo is not None
    print(
        f"\naec on, barge-in: speaker silent {stop_ms:.1f} ms after the user's speech began "
        f"(target {STOP_TARGET_MS:.0f} ms; talk's local figure "
        f"{barge[0].local_stop_ms if barge else None} ms from the detected onset); barge-ins "
        f"{[b.kind for b in barge]}, frames heard from the microphone itself {echo.raw_frames}"
    )
    if barge and barge[0].onset is not None:  # where the time went
        b = barge[0]
        print(
            f"  onset dated {1000 * (b.onset.t_onset - onset):+.1f} ms from the true one, "
            f"detected {1000 * (b.onset.t_detected - b.onset.t_onset):.1f} ms after it, "
            f"flushed {1000 * (b.t_flush - b.onset.t_detected):.1f} ms later, last loud sample "
            f"{1000 * (t[played[-1]] - b.t_flush):+.1f} ms from the flush"
        )
    assert len(barge) == 1 and barge[0].kind == "speech"
    assert not conv.false_barge_ins()
    assert stop_ms < STOP_BOUND_MS
    assert not after.any(), "the interrupted reply kept playing"
    turn = conv.result.turns[0]
    assert turn.outcome == "cancelled" and turn.reason == "client_cancelled"
    return stop_ms


@pytest.mark.usefixtures("pulse_server")
@pytest.mark.slow
@pytest.mark.audio
async def test_user_speech_over_the_assistant_stops_it(tmp_path: Path, echo_path: EchoPath) -> None:
    """The detector, deciding on the cancelled signal, still hears the user over the
    assistant, and the speaker goes silent within STOP_BOUND_MS (one trial)."""
    await stop_after_user_speech(tmp_path, echo_path)


@pytest.mark.usefixtures("pulse_server")
@pytest.mark.timing
@pytest.mark.audio
@pytest.mark.slow
async def test_stop_meets_the_issues_150_ms(tmp_path: Path, echo_path: EchoPath) -> None:
    """The issue's figure: the median stop over STOP_TRIALS trials <= 150 ms (a median,
    because one trial on a loaded 2-core machine can lose 50 ms to scheduling). A trial
    whose own checks fail (stop_after_user_speech: e.g. the reply was already stopped by its
    echo) counts as no stop at all (inf) and is printed with its reason."""
    stops: list[float] = []
    for k in range(STOP_TRIALS):
        try:
            stops.append(await stop_after_user_speech(tmp_path / f"trial{k}", echo_path))
        except AssertionError as exc:
            print(f"\ntrial {k} failed its checks: {str(exc).splitlines()[0]}")
            stops.append(float("inf"))
    print(f"\nstops over {STOP_TRIALS} trials: {sorted(round(s, 1) for s in stops)} ms")
    median = float(np.median(stops))
    assert median <= STOP_TARGET_MS, f"median stop {median:.0f} ms > {STOP_TARGET_MS:.0f} ms"


@pytest.mark.usefixtures("pulse_server")
@pytest.mark.audio
async def test_missing_binding_is_one_line_and_talk_goes_on(
    tmp_path: Path, echo_path: EchoPath, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Without livekit (as on a platform it has no wheel for) talk says so once and runs."""
    monkeypatch.setitem(sys.modules, "livekit", None)  # `import livekit` raises ImportError
    server = await start_server(server_config())
    try:
        with routed(PULSE_SINK=echo_path.speaker, PULSE_SOURCE=echo_path.microphone):
            session = TalkSession(TalkConfig(url=server.url, duration_s=2.0), PlainView())
            result = await asyncio.wait_for(session.run(), 30)
    finally:
        await server.close()
    out = capsys.readouterr().out
    assert result.error is None and result.stop_reason == "duration"
    assert out.count(MISSING_LINE) == 1
    assert session.echo is None and session.aec_state.startswith("unavailable")


# --- the canceller on its own, and the options --------------------------------------------


BLOCK = 320  # talk's 20 ms microphone blocks at 16 kHz


def cancel_offline(
    echo: EchoCanceller, near: np.ndarray, far24: np.ndarray, *, arrives_s: float = 0.0
) -> Iterator[tuple[float, InputBlock]]:
    """A synthetic laptop's clocks: the speaker hands its 20 ms blocks (24 kHz) 60 ms before
    their DAC time; far block k's DAC time is microphone block k's ADC time ``t``; each
    microphone block is processed ``arrives_s`` after it. Yields (``t``, cleaned block);
    ``echo.for_barge_in`` is that block's detector input."""
    ahead = 3
    for j in range(ahead):
        echo.render(far24[j * 480 : (j + 1) * 480], 100.0 + j * 0.02)
    for k in range(near.size // BLOCK):
        j = k + ahead
        echo.render(far24[j * 480 : (j + 1) * 480], 100.0 + j * 0.02)
        t = 100.0 + k * 0.02
        mic = InputBlock(near[k * BLOCK : (k + 1) * BLOCK], k * 20.0, t)
        yield t, echo.process(mic, t + arrives_s)


def test_canceller_removes_a_delayed_echo_and_takes_its_delay_from_the_clocks() -> None:
    """Synthetic laptop: the far end (24 kHz, as the speaker plays it) comes back 60 ms later
    at -10 dB. ERLE after 3 s >= 25 dB; the far end is fed by the clocks: the stream delay
    is the render lead, and the devices' latency is the DAC lead + the capture lag."""
    rtc = load_binding()
    assert rtc is not None, "the aec extra (livekit) is not installed: run install.sh"
    speech, _ = sf.read(str(REC / "count.wav"), dtype="float32")
    from duplexctl.audio.resample import resample

    far24 = resample(np.concatenate([speech, speech]), RATE, 24000)
    far16 = resample(far24, 24000, RATE)
    delay = int(0.060 * RATE)
    near = np.zeros_like(far16)
    near[delay:] = far16[:-delay] * 10 ** (-10 / 20)
    echo = EchoCanceller(rtc, RATE, 24000)
    out = []
    # the mic block arrives 40 ms after its ADC time (clocks as PortAudio reports them)
    for k, (t, cleaned) in enumerate(cancel_offline(echo, near, far24, arrives_s=0.040)):
        assert cleaned.start_ms == k * 20.0 and cleaned.samples.size == BLOCK
        # its content left the microphone the module's delay earlier than the raw block's
        assert cleaned.t_capture == pytest.approx(t - echo.module_delay_s)
        out.append(cleaned.samples)
    y = np.concatenate(out)
    steady = slice(3 * RATE, y.size)
    erle = 10 * np.log10(np.sum(near[steady] ** 2) / max(np.sum(y[steady] ** 2), 1e-15))
    stats = echo.stats()
    print(
        f"\nsynthetic echo: ERLE {erle:.1f} dB, delay {echo.delay_ms:.1f} ms, module delay "
        f"{1000 * echo.module_delay_s:.2f} ms, added per block {stats.added_ms_mean:.2f} ms "
        f"mean / {stats.added_ms_max:.2f} ms worst"
    )
    assert erle >= 25.0
    # the far end is fed in whole 10 ms frames up to RENDER_LEAD_S past the capture frame
    assert 1000 * RENDER_LEAD_S - 10.0 < echo.delay_ms <= 1000 * RENDER_LEAD_S + 0.5
    assert echo.erle_db is not None and echo.erle_db >= 25.0


def test_a_far_end_that_comes_after_the_microphone_is_counted_and_not_the_runs_delay() -> None:
    """The speaker's blocks stop coming for 100 ms while the microphone's go on, then come
    again, already behind the capture: for those frames the module is told 0 (its least)
    and each is counted late; the figure shown stays the median of what the last 2 s were
    told (CI's 60 s conversation ended on such a frame and read "stream delay 0 ms")."""
    rtc = load_binding()
    assert rtc is not None, "the aec extra (livekit) is not installed: run install.sh"
    echo = EchoCanceller(rtc, RATE, 24000)
    far24 = np.zeros(24000 * 3, dtype=np.float32)
    near = np.zeros(RATE * 2, dtype=np.float32)
    for _ in cancel_offline(echo, near, far24):
        pass
    assert echo.far_late_frames == 0 and echo.delay_ms > 0
    on_time = echo.stats().delay_ms
    blocks = near.size // BLOCK
    t_far = 100.0 + (blocks + 3) * 0.02  # the DAC time of the next far block
    for k in range(blocks, blocks + 5):  # 100 ms of microphone, no far end
        echo.process(InputBlock(near[:BLOCK], k * 20.0, 100.0 + k * 0.02), 100.0 + k * 0.02)
    late_before = echo.far_late_frames
    k = blocks + 5
    for j in range(3):  # comes now: it began playing 40 ms before this capture
        echo.render(far24[:480], t_far + j * 0.02)
    echo.process(InputBlock(near[:BLOCK], k * 20.0, 100.0 + k * 0.02), 100.0 + k * 0.02)
    assert echo.delay_ms == 0.0 and echo.far_late_frames > late_before
    assert echo.stats().delay_ms == on_time  # the run's figure: what nearly every frame was told


CLI = textwrap.dedent(
    """
    import sys
    from duplexctl.cli import main
    sys.argv = ["duplexctl", *sys.argv[1:]]
    main()
    """
)


def test_bad_aec_value_is_one_line_exit_2() -> None:
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-c", CLI, "talk", "--aec", "maybe", "--output-device", "none"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "--aec: 'maybe' is not one of 'on', 'off'" in lines[0]


def test_barge_in_hears_the_user_at_once_and_never_the_echo_leaks() -> None:
    """While the far end plays: when the echo path jumps and AEC3 leaks the echo, nothing of
    the leak is sent or reaches the barge-in detector (``for_barge_in``); when the user talks
    over the assistant the detector hears them from their first 100 ms (live, AEC3 holds
    that onset down ~100 ms)."""
    rtc = load_binding()
    assert rtc is not None, "the aec extra (livekit) is not installed: run install.sh"
    from duplexctl.audio.resample import resample

    speech, _ = sf.read(str(REC / "count.wav"), dtype="float32")
    user, _ = sf.read(str(REC / "interrupt.wav"), dtype="float32")
    far16 = np.concatenate([speech, speech])
    far24 = resample(far16, RATE, 24000)
    gain = 10 ** (-10 / 20)
    near = np.zeros_like(far16)
    jump = 5 * RATE  # the echo path goes from 60 to 160 ms here (an output underrun)
    near[960:jump] = far16[: jump - 960] * gain
    near[jump:] = far16[jump - 2560 : far16.size - 2560] * gain
    talk_at = 8 * RATE  # the user talks over the assistant from here, ~10 dB above the echo
    said = user[: near.size - talk_at]
    near[talk_at : talk_at + said.size] += said * 0.7
    echo = EchoCanceller(rtc, RATE, 24000)
    cleaned, heard = [], []
    for _, block in cancel_offline(echo, near, far24):
        cleaned.append(block)
        assert echo.for_barge_in is not None
        heard.append(echo.for_barge_in.samples)
    y, h = np.concatenate([b.samples for b in cleaned]), np.concatenate(heard)

    def db(x: np.ndarray) -> float:
        return float(10 * np.log10(np.mean(np.square(x, dtype=np.float64)) + 1e-15))

    leak = slice(jump, jump + RATE)  # the second after the jump: AEC3 re-converging
    entry = manifest.lookup(REC / "interrupt.wav")
    assert entry is not None
    onset = talk_at + int(entry.speech_start_ms * RATE / 1000)
    first = slice(onset, onset + int(0.1 * RATE))  # the user's first 100 ms
    print(
        f"\nleak after the jump: cleaned {db(y[leak]):.1f} dBFS, heard {db(h[leak]):.1f} dBFS; "
        f"user's first 100 ms: mic {db(near[first]):.1f}, cleaned {db(y[first]):.1f}, heard "
        f"{db(h[first]):.1f} dBFS; erl {echo.erl_db:.1f} dB, gated {echo.gated_frames} "
        f"(leaks {echo.leaks_silenced}), raw {echo.raw_frames}"
    )
    assert echo.leaks_silenced > 10  # the jump made AEC3 leak (the scenario is real) ...
    assert db(y[leak]) < -60.0  # ... and nothing of it is sent
    assert db(h[leak]) < -60.0  # or reaches the detector (it fires at -40)
    assert db(h[first]) > -40.0  # the user's onset does, at once
    assert echo.raw_frames > 0


def test_the_first_replys_leading_edge_is_not_the_user() -> None:
    """The first echo the canceller ever hears starts at full loudness 3 samples before a 10 ms
    frame ends (60 ms late less 3 samples, at -10 dB): that partly filled frame must not teach the gate an
    echo path 15-20 dB quieter than the real one, and no frame of the plain echo after it
    may reach the barge-in detector as the user (found by CI: a false barge-in 40 ms into
    the first reply, whose voice began as loud as this)."""
    rtc = load_binding()
    assert rtc is not None, "the aec extra (livekit) is not installed: run install.sh"
    from duplexctl.audio.resample import resample

    speech, _ = sf.read(str(REC / "count.wav"), dtype="float32")
    loud = int(np.argmax(np.abs(speech) > 0.3))  # the reply begins in mid-word
    far16 = np.concatenate([np.zeros(RATE, dtype=np.float32), speech[loud:]])
    far24 = resample(far16, RATE, 24000)
    delay = int(0.060 * RATE) - 3  # 3 samples of echo in its first frame
    near = np.zeros_like(far16)
    near[delay:] = far16[:-delay] * 10 ** (-10 / 20)
    echo = EchoCanceller(rtc, RATE, 24000)
    loud_frames = 0
    for _ in cancel_offline(echo, near, far24):
        assert echo.for_barge_in is not None
        h = echo.for_barge_in.samples.reshape(-1, FRAME)
        loud_frames += int(np.sum(np.mean(np.square(h, dtype=np.float64), axis=1) > 1e-4))
    print(
        f"\nleading edge: raw {echo.raw_frames}, loud frames heard {loud_frames}, erl {echo.erl_db}"
    )
    assert echo.raw_frames == 0 and loud_frames == 0
    assert echo.erl_db is not None and -14.0 < echo.erl_db < -6.0  # the path's -10 dB
