"""Acoustic echo cancellation for ``talk`` on laptop speakers (``--aec on``, the default).

Through speakers the microphone hears the assistant: without cancellation the barge-in
detector fires on the assistant's own voice and the server hears itself. ``talk`` removes
the echo with WebRTC's audio processing module (AEC3, optional noise suppression), the one
browsers and LiveKit's agents run, through LiveKit's ``livekit`` package
(``rtc.AudioProcessingModule``): maintained by LiveKit, ``py3-none`` wheels for Linux,
macOS and Windows (x86-64 and arm64), so it installs on any Python >= 3.9 without a
compiler. The alternatives on PyPI were weaker: ``pywebrtc-audio`` (the same module, small,
but a 0.x project of one maintainer with per-Python wheels), ``webrtc-apm`` and
``aec-audio-processing`` (Windows wheels only), ``webrtc-audio-processing`` and
``speexdsp`` (source-only, unmaintained since 2018-2019; Speex's echo canceller is also
weaker than AEC3), ``webrtc-noise-gain`` (no echo canceller). It is the ``aec`` extra:
without it ``talk`` says so in one line and runs without cancellation.

What the module is given, and why:

* **far end (reverse stream)** — exactly what the speaker plays: the output callback hands
  every block it gives the device, silence included, with the DAC time PortAudio reports
  for it (:meth:`EchoCanceller.render`, called on the audio thread: a deque append only).
  The loop thread converts it to the module's rate with the project's streaming resampler.
* **alignment and stream delay, from the devices' clocks** — each 10 ms capture frame is
  dated by its ADC time, each far-end sample by its DAC time (both reported by PortAudio
  per callback, so they follow the devices' latencies as those move). Before a capture
  frame is processed, the far end is fed up to ``RENDER_LEAD_S`` past that frame's capture
  time, and WebRTC's ``delay = (t_render - t_analyze) + (t_process - t_capture)`` is that
  lead as the clocks give it (DAC time of the newest far-end frame fed - the capture
  frame's ADC time), set before every frame. Feeding by the clocks rather than as blocks
  arrive keeps the render stream a fixed distance ahead of the echo whatever the thread
  and buffer jitter (fed as it arrived, the lead wandered by tens of ms and AEC3 lost the
  echo now and then); AEC3's own estimator finds what no clock sees (the room, converters).
  The screen shows the devices' current latency (speaker's DAC lead + capture lag) too.
* **near end** — each microphone block, cut into 10 ms frames; blocks that are whole frames
  (``talk`` captures 20 ms) leave nothing behind. AEC3 itself delays the capture by a fixed
  amount (it works in 4 ms blocks: 127 samples = 7.9 ms at 16 kHz), measured once when the
  canceller is built (:func:`module_delay`) and taken off the cleaned blocks' capture times,
  so onsets found on the cleaned signal are dated when the user really spoke. Added capture
  latency = that delay + the computing time per block (:class:`EchoStats`).

ERLE (echo return loss enhancement: how much quieter the echo is after cancellation) is
measured over the frames where the far end was audible in the last ``ERLE_WINDOW_S``:
``10·log10(Σ mic² / Σ cleaned²)``. User speech over the assistant lowers it (that speech
is kept, as it must be), so the figure is what the canceller achieves now, not a best case.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from duplexctl.audio.resample import StreamResampler
from duplexctl.talk.inputs import InputBlock

#: Rates the WebRTC module processes natively; another capture rate is refused (one line).
APM_RATES: Final = (8000, 16000, 32000, 48000)
FRAME_MS: Final = 10
#: The extra that installs the binding (pyproject.toml), named in the one-line notice.
MISSING_LINE: Final = (
    "echo cancellation unavailable: the livekit package is not installed "
    "(pip install 'duplexctl[aec]'); talking without it - use headphones"
)
#: Far-end frames quieter than this do not count towards ERLE (nothing to cancel).
FAR_ACTIVE_DBFS: Final = -50.0
#: How far the far end fed to the module runs ahead of the capture frame processed, on the
#: devices' clocks: AEC3 needs the render stream first, and it finds the rest (the room,
#: the converters) with its own delay estimator.
RENDER_LEAD_S: Final = 0.020
#: The far end's recent peak predicts the echo: over this much of it, as the echo comes
#: back within it after the clock alignment (room, converters: 60 ms on the test path).
#: 150 ms stopped the user 100 ms sooner but let echo-path jumps through (a false barge-in).
FAR_WINDOW_MS: Final = 300
#: The echo path's loss before enough echo-only frames were seen: as loud as the far end (a
#: laptop's speaker next to its microphone is no louder at the microphone than that).
ERL_PRIOR_DB: Final = 0.0
#: The loss learned is this percentile of mic/far-peak over the last ``ERL_WINDOW_FRAMES``
#: frames the canceller proved echo-only, and stands in for the prior only after
#: ``ERL_MIN_FRAMES`` of them (a reply's leading edge fills a frame partly, reading the loss
#: 15-20 dB low; a user's onset that AEC3 holds down reads it high for ~100 ms: a high
#: percentile over 2 s ignores both, where a running envelope followed them).
ERL_PERCENTILE: Final = 90.0
ERL_WINDOW_FRAMES: Final = 200
ERL_MIN_FRAMES: Final = 20
#: ... recomputed every this many of them (a percentile of 200 costs ~50 us: every frame it
#: would be half of what cancelling costs; over a 2 s window 100 ms later changes nothing).
ERL_EVERY_FRAMES: Final = 10
#: A frame no louder than the far end's predicted echo + this is the echo, for barge-in.
GATE_MARGIN_DB: Final = 6.0
#: A device stamp further than this from the sample count is a real gap, not jitter.
JUMP_S: Final = 0.030
#: AEC3 output above this (-50 dBFS) in a frame the echo explains is a leak.
LEAK_POWER: Final = 1e-5
ERLE_WINDOW_S: Final = 2.0
ERLE_WINDOW_FRAMES: Final = int(ERLE_WINDOW_S * 1000 / FRAME_MS)
_INT16: Final = 32767.0


def load_binding() -> Any | None:
    """``livekit.rtc`` or None when the ``aec`` extra is not installed on this platform."""
    try:
        from livekit import rtc
    except (ImportError, OSError):  # no package, or its native library cannot load here
        return None
    return rtc


def module_delay(rtc: Any, rate: int) -> int:
    """Samples by which the module delays the capture stream (far end silent): a seeded
    noise burst through a throwaway instance, the lag of the cross-correlation peak."""
    frame = rate * FRAME_MS // 1000
    apm = rtc.AudioProcessingModule(echo_cancellation=True)
    burst = np.random.default_rng(22).uniform(-0.3, 0.3, 12 * frame).astype(np.float32)
    out = []
    for k in range(12):
        apm.process_reverse_stream(rtc.AudioFrame(bytearray(2 * frame), rate, 1, frame))
        apm.set_stream_delay_ms(0)
        f = rtc.AudioFrame(_to_int16(burst[k * frame : (k + 1) * frame]), rate, 1, frame)
        apm.process_stream(f)
        out.append(_from_int16(f.data))
    y = np.concatenate(out)
    span = burst.size - 4 * frame
    scores = [float(np.dot(burst[:span], y[lag : lag + span])) for lag in range(4 * frame)]
    return int(np.argmax(scores))


class SampleClock:
    """When each block of a sample stream starts, from per-block stamps that jitter.

    PortAudio's DAC and ADC times are converted to the monotonic clock in the Python
    callback, which a loaded machine runs late by milliseconds to tens of them; taken one by
    one they would move the far end against the microphone by as much, and AEC3 loses the
    echo when its alignment jumps. So the stream is timed by its sample count, corrected by
    1 % of each stamp's error (drift is followed, jitter averages out); a stamp off by more
    than ``JUMP_S`` is a real discontinuity (an underrun, a restart, dropped input) and
    re-anchors the clock, the jump being returned."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._next: float | None = None

    def stamp(self, t_block: float, n: int) -> tuple[float, float]:
        """(start time of this block of ``n`` samples stamped ``t_block``, jump in s)."""
        jump = 0.0
        if self._next is None:
            start = t_block
        elif abs(t_block - self._next) > JUMP_S:
            start, jump = t_block, t_block - self._next
        else:
            start = self._next + 0.01 * (t_block - self._next)
        self._next = start + n / self.rate
        return start, jump


def _to_int16(samples: np.ndarray) -> bytearray:
    clipped = np.clip(samples, -1.0, 1.0) * _INT16
    return bytearray(np.round(clipped).astype(np.int16).tobytes())


def _from_int16(data: Any) -> np.ndarray:
    return np.frombuffer(data, dtype=np.int16).astype(np.float32) / _INT16


def _power(samples: np.ndarray) -> float:
    return float(np.mean(np.square(samples, dtype=np.float64))) if samples.size else 0.0


@dataclass(frozen=True, slots=True)
class EchoStats:
    """What the screen shows: ``erle_db`` None until the far end has been audible."""

    erle_db: float | None
    #: the stream delay told to the module: the median over the last ERLE_WINDOW_S of frames
    delay_ms: float
    device_latency_ms: float
    frames: int
    cpu_s: float
    #: what cancelling adds to the capture path per block: the module's own delay, the
    #: computing time (mean, worst) and audio held back for the next 10 ms frame (0 when
    #: blocks are whole frames)
    added_ms_mean: float
    added_ms_max: float

    def describe(self) -> str:
        erle = "-" if self.erle_db is None else f"{self.erle_db:.0f} dB"
        return (
            f"on (ERLE {erle}, devices {self.device_latency_ms:.0f} ms, "
            f"stream delay {self.delay_ms:.0f} ms)"
        )


class EchoCanceller:
    """WebRTC AEC3 between the speaker's output and the microphone (module docstring)."""

    def __init__(
        self,
        rtc: Any,
        rate: int,
        render_rate: int,
        *,
        noise_suppression: bool = False,
    ) -> None:
        if rate not in APM_RATES:
            raise ValueError(f"echo cancellation needs an input rate of {APM_RATES} Hz")
        self.rtc = rtc
        self.rate = rate
        self.frame = rate * FRAME_MS // 1000
        self.apm = rtc.AudioProcessingModule(
            echo_cancellation=True,
            noise_suppression=noise_suppression,
            high_pass_filter=True,
        )
        self.noise_suppression = noise_suppression
        self.module_delay_s = module_delay(rtc, rate) / rate
        # far end: (device-rate samples, DAC time) from the audio thread; deque appends and
        # poplefts are atomic, so the audio thread never waits for the loop
        self._rendered: deque[tuple[np.ndarray, float, float]] = deque(maxlen=1000)
        self._output_latency_s = 0.0  # DAC time - when handed, newest speaker block
        self._render_resampler = StreamResampler(render_rate, rate)
        self._far = np.zeros(0, dtype=np.float32)  # converted, not yet analysed
        self._far_end_t = 0.0  # DAC time just after the last sample of _far
        self._far_clock = SampleClock(render_rate)  # DAC times of the speaker's blocks
        self._near_clock = SampleClock(rate)  # ADC times of the microphone's blocks
        self._far_in = 0  # device-rate samples given to the resampler
        self._far_out = 0  # module-rate samples it gave back
        self._far_recent: deque[float] = deque(maxlen=max(1, FAR_WINDOW_MS // FRAME_MS))
        # near end
        self._near_rest = np.zeros(0, dtype=np.float32)
        self._near_rest_t: float | None = None
        self._out_ms: float | None = None  # user-timeline position of the next output
        self._window: deque[tuple[float, float]] = deque(maxlen=ERLE_WINDOW_FRAMES)
        self.delay_ms = 0.0  # the stream delay told to the module for the last frame
        #: what it was told over the last ERLE_WINDOW_S: the screen and the report show
        #: their median, as one frame's figure moves with the speaker's block boundaries
        self._delays: deque[float] = deque(maxlen=ERLE_WINDOW_FRAMES)
        #: frames whose newest far end fed started before the frame itself: the speaker's
        #: block came later than the microphone's (a loaded machine, now and then), so the
        #: stream delay was the module's least, 0, for it
        self.far_late_frames = 0
        self.device_latency_ms = 0.0
        self.render_gaps = 0  # underruns and restarts the far end was corrected for
        self.erl_db: float | None = None  # echo path: mic power / recent far-end peak, dB
        self._erl_seen: deque[float] = deque(maxlen=ERL_WINDOW_FRAMES)  # proven-echo frames
        self._erl_pending = 0  # of them, added since erl_db was last computed
        self.gated_frames = 0  # frames kept from the barge-in detector as echo leaks
        self.raw_frames = 0  # frames it heard from the microphone itself: louder than echo
        self.leaks_silenced = 0  # gated frames in which AEC3 had let echo through
        #: what the barge-in detector hears of the last block: the cleaned block, and the
        #: microphone itself where it is louder than the echo can be (_echo_explains)
        self.for_barge_in: InputBlock | None = None
        self.frames = 0
        self.blocks = 0
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.added_max_s = 0.0

    # -- audio thread --

    def render(self, samples: np.ndarray, t_dac: float) -> None:
        """The speaker handed ``samples`` (device rate) to the device; first one at ``t_dac``."""
        self._rendered.append((samples, t_dac, time.monotonic()))

    # -- loop thread --

    def _take_rendered(self) -> None:
        """Move what the speaker handed over into the far-end buffer, at the module's rate.

        The blocks are timed by :class:`SampleClock` from their DAC times, and the buffer's
        end by the newest block's, so the resampler's uneven chunks do not jitter it. A block
        that starts clearly later than the last one ended is an underrun, and the device's
        silence is added; one that starts clearly earlier is a restart (a flush aborts what
        the device held, an underrun recovery drops it), and what was handed but not played
        is dropped if not yet fed."""
        while self._rendered:
            samples, t_dac, t_handed = self._rendered.popleft()
            self._output_latency_s = t_dac - t_handed
            converted = self._render_resampler.process(samples)
            t_dac, gap = self._far_clock.stamp(t_dac, samples.size)
            if gap > 0:  # an underrun: the device played silence meanwhile
                silence = np.zeros(min(round(gap * self.rate), self.rate), dtype=np.float32)
                self._far = np.concatenate([self._far, silence])
                self.render_gaps += 1
            elif gap < 0 and self._far.size:  # a restart (a flush, an underrun recovery):
                t_far = self._far_end_t - self._far.size / self.rate  # what was handed but
                self._far = self._far[: max(0, round((t_dac - t_far) * self.rate))]  # never
                self.render_gaps += 1  # played is not analysed
            self._far = np.concatenate([self._far, converted])
            # the resampler holds a few samples back: date the output by what it has
            # given out so far (in input samples), not by the input block's end
            self._far_in += samples.size
            self._far_out += converted.size
            held = self._far_in - self._far_out * self._render_resampler.rate_in / self.rate
            rate_in = self._render_resampler.rate_in
            self._far_end_t = t_dac + (samples.size - held) / rate_in
        limit = 2 * self.rate  # the speaker never runs more than its latency ahead
        if self._far.size > limit:
            self._far = self._far[-limit:]

    def _analyse_far_end(self, t_capture: float) -> float | None:
        """Feed the far end played up to ``RENDER_LEAD_S`` after ``t_capture`` (the capture
        frame about to be processed): on the devices' clocks the render stream then leads
        the microphone by the same amount whatever the threads' jitter. Returns the stream
        delay to tell the module (DAC time of the newest frame fed - ``t_capture``)."""
        delay: float | None = None
        while self._far.size >= self.frame:
            t_first = self._far_end_t - self._far.size / self.rate
            if t_first > t_capture + RENDER_LEAD_S:
                break
            chunk = self._far[: self.frame]
            self._far = self._far[self.frame :]
            self._far_recent.append(_power(chunk))
            self.apm.process_reverse_stream(
                self.rtc.AudioFrame(_to_int16(chunk), self.rate, 1, self.frame)
            )
            delay = t_first - t_capture
        return delay

    def _echo_explains(self, mic_p: float, out_p: float, far_p: float) -> bool:
        """Whether this frame's microphone power is explained by the echo the far end
        predicts (its peak over the last FAR_WINDOW_MS times the echo path's loss, +
        ``GATE_MARGIN_DB``); until the loss has been learned, ``ERL_PRIOR_DB`` stands in.

        Why more than AEC3 (measured on the PulseAudio echo path of tests/test_talk_aec.py,
        on a machine loaded 3-7 deep on 2 cores): AEC3 leaks the echo for a moment whenever
        the echo path jumps (speaker underruns: false barge-ins in 2 of 4 60 s conversations,
        and the server's VAD cancelling on the leak), and it holds the first 80-110 ms of a
        user speaking over the assistant down while it decides who talks, most of the 150 ms
        a stop may take. So a frame the echo explains is silenced, in what is sent too (a
        residual-echo gate: the server's VAD cancelled on those leaks), and a frame louder
        than the echo can be is the user (a classic energy double-talk detector), whom the
        barge-in detector then hears from the microphone itself. What the gate costs: a user
        speaking over the assistant no louder than its echo + 6 dB is not sent until louder,
        which AEC3 does at such an onset anyway. The loss (ERL) is a high percentile
        (``ERL_PERCENTILE``) of mic/far-peak over the last 2 s of frames the canceller itself
        proved echo-only (output >= 20 dB below the microphone); until ``ERL_MIN_FRAMES``
        such frames were seen, the echo is taken to be as loud as the far end. A running
        envelope did worse both ways (docs/metrics.md): the user's onset, held down by AEC3,
        raised it until the user no longer passed (stops of ~700 ms), and the first reply's
        leading edge, one partly filled frame, set it 18 dB too low, so the plain echo after
        it passed as the user (a false barge-in 40 ms into the first reply, on CI)."""
        if mic_p <= 0:
            return True
        excess_db = 10.0 * math.log10(mic_p / far_p)
        if out_p * 100.0 <= mic_p:  # cancelled by >= 20 dB: this frame was echo
            self._erl_seen.append(excess_db)
            self._erl_pending += 1
            seen = len(self._erl_seen)
            if seen >= ERL_MIN_FRAMES and (
                self.erl_db is None or self._erl_pending >= ERL_EVERY_FRAMES
            ):
                self.erl_db = float(np.percentile(self._erl_seen, ERL_PERCENTILE))
                self._erl_pending = 0
        erl = ERL_PRIOR_DB if self.erl_db is None else self.erl_db
        return excess_db < erl + GATE_MARGIN_DB

    def process(self, block: InputBlock, now: float | None = None) -> InputBlock:
        """Cancel the echo in one microphone block; the cleaned block keeps its timeline."""
        started = time.process_time()
        wall = time.perf_counter()
        now = time.monotonic() if now is None else now
        self._take_rendered()
        if self._out_ms is None:
            self._out_ms = block.start_ms
        t_block, _ = self._near_clock.stamp(block.t_capture, block.samples.size)
        if self._near_rest.size == 0:
            self._near_rest_t = t_block
        data = np.concatenate([self._near_rest, block.samples])
        t_first = self._near_rest_t if self._near_rest_t is not None else t_block
        # what the devices report now: the speaker's DAC lead + this block's capture lag
        self.device_latency_ms = 1000.0 * (self._output_latency_s + now - t_first)
        n_frames = data.size // self.frame
        cleaned = np.empty(n_frames * self.frame, dtype=np.float32)
        barge = np.empty(n_frames * self.frame, dtype=np.float32)
        for k in range(n_frames):
            t_frame = t_first + k * FRAME_MS / 1000.0
            delay = self._analyse_far_end(t_frame)
            if delay is not None:
                self.delay_ms = max(0.0, 1000.0 * delay)
                self.far_late_frames += int(delay <= 0.0)
            self._delays.append(self.delay_ms)
            far = max(self._far_recent, default=0.0)
            chunk = data[k * self.frame : (k + 1) * self.frame]
            frame = self.rtc.AudioFrame(_to_int16(chunk), self.rate, 1, self.frame)
            self.apm.set_stream_delay_ms(round(self.delay_ms))
            self.apm.process_stream(frame)
            out = _from_int16(frame.data)
            heard = out
            if far > 0 and 10.0 * math.log10(far) > FAR_ACTIVE_DBFS:
                mic_p, out_p = _power(chunk), _power(out)
                self._window.append((mic_p, out_p))
                if self._echo_explains(mic_p, out_p, far):  # the assistant: AEC3's leak
                    self.leaks_silenced += int(out_p > LEAK_POWER)
                    out = heard = np.zeros_like(out)  # is silenced
                    self.gated_frames += 1
                else:
                    heard = chunk  # louder than the echo can be: the user, without the
                    self.raw_frames += 1  # ~100 ms AEC3 may hold a double-talk onset down
            cleaned[k * self.frame : (k + 1) * self.frame] = out
            barge[k * self.frame : (k + 1) * self.frame] = heard
        self.frames += n_frames
        self._near_rest = data[n_frames * self.frame :]
        self._near_rest_t = t_first + cleaned.size / self.rate if self._near_rest.size else None
        out_block = InputBlock(cleaned, self._out_ms, t_first - self.module_delay_s)
        self.for_barge_in = InputBlock(barge, out_block.start_ms, out_block.t_capture)
        self._out_ms += 1000.0 * cleaned.size / self.rate
        self.cpu_s += time.process_time() - started
        added = time.perf_counter() - wall + self._near_rest.size / self.rate + self.module_delay_s
        self.wall_s += added
        self.added_max_s = max(self.added_max_s, added)
        self.blocks += 1
        return out_block

    @property
    def erle_db(self) -> float | None:
        """Echo attenuation over the recent far-end-active frames (None: no echo yet)."""
        if not self._window:
            return None
        mic = sum(m for m, _ in self._window)
        clean = sum(c for _, c in self._window)
        if mic <= 0:
            return None
        return 10.0 * math.log10(mic / max(clean, 1e-12))

    def stats(self) -> EchoStats:
        mean = 1000.0 * self.wall_s / self.blocks if self.blocks else 0.0
        return EchoStats(
            self.erle_db,
            float(np.median(self._delays)) if self._delays else self.delay_ms,
            self.device_latency_ms,
            self.frames,
            self.cpu_s,
            mean,
            1000.0 * self.added_max_s,
        )

    @property
    def audio_s(self) -> float:
        """Seconds of microphone audio cancelled so far."""
        return self.frames * FRAME_MS / 1000.0
