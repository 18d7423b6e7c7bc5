"""Real microphone and speaker for ``talk`` (sounddevice / PortAudio), imported lazily.

Why lazy: ``sounddevice`` raises ``OSError: PortAudio library not found`` at import on a
machine without libportaudio2, and only ``talk`` needs a sound card. Every function here
imports it on first use through :func:`_sd`, which turns the failure into one
:class:`~duplexctl.errors.MissingDependency` line (exit 2) instead of a traceback.

Clocks. PortAudio stamps callbacks on its own stream clock (on Linux/ALSA that is wall-clock
time, not ``time.monotonic``). Each callback converts: ``offset = monotonic() - currentTime``,
so an ADC/DAC time ``t`` becomes ``t + offset`` on the process's monotonic clock
(docs/metrics.md: one monotonic clock per process).

Playback position (docs/metrics.md, "Playback clock ... with a speaker the output device callback
drives it"): :class:`Speaker` never derives ``played_ms`` from bytes received or enqueued. The
output callback records, per response, which frames it handed to the device and the DAC time
PortAudio reports for the first of them (``outputBufferDacTime``; when a host API reports
none, callback time + ``stream.latency``, the output latency PortAudio states for the
stream). ``played_ms`` is the response position whose DAC time has passed, interpolated in
real time inside one callback block. Frames handed but not yet at the DAC are not "played".

Threading. PortAudio callbacks run on an audio thread. They touch shared state only under a
short ``threading.Lock`` and never block; results for asyncio code cross over with
``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

import numpy as np

from duplexctl.audio.resample import StreamResampler
from duplexctl.errors import BadInput, MissingDependency

Kind = Literal["input", "output"]

PORTAUDIO_MISSING = "PortAudio is not installed: apt-get install libportaudio2 (or run install.sh)"
LIST_HINT = "`duplexctl talk --list-devices` lists them"

# ADC/DAC timestamps further than this from the callback's own time are distrusted (some
# host APIs report 0 or garbage); we then fall back to callback time and stated latency.
_MAX_SANE_LATENCY_S = 2.0


def _sd() -> ModuleType:
    """Import sounddevice on first use, mapping a missing PortAudio to one clear line."""
    try:
        import sounddevice
    except OSError as exc:  # sounddevice: "PortAudio library not found"
        raise MissingDependency(PORTAUDIO_MISSING) from exc
    except ImportError as exc:  # the Python package itself (or a test that blocks it)
        raise MissingDependency(
            "the sounddevice package is not importable: pip install sounddevice "
            f"(and apt-get install libportaudio2) [{exc}]"
        ) from exc
    return sounddevice


def reinitialize() -> None:
    """Make PortAudio re-read the device list.

    PortAudio enumerates devices once, when sounddevice is imported; a sound server started
    afterwards (a test's private PulseAudio, a USB headset plugged in) stays invisible until
    PortAudio is terminated and initialised again. Open streams must be closed first.
    """
    sd = _sd()
    sd._terminate()
    sd._initialize()


# --- device discovery -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One PortAudio device, as ``talk --list-devices`` shows it."""

    index: int
    name: str
    hostapi: str
    max_input_channels: int
    max_output_channels: int
    default_samplerate: float
    is_default_input: bool = False
    is_default_output: bool = False

    def channels(self, kind: Kind) -> int:
        return self.max_input_channels if kind == "input" else self.max_output_channels

    def describe(self) -> str:
        """One line: ``> 1 default (ALSA) in 32, out 32, 44100 Hz`` (``>``/``<`` = default in/out)."""
        mark = ("<" if self.is_default_input else " ") + (">" if self.is_default_output else " ")
        return (
            f"{mark} {self.index:>2} {self.name} ({self.hostapi}) "
            f"in {self.max_input_channels}, out {self.max_output_channels}, "
            f"{self.default_samplerate:g} Hz"
        )


def _default_index(sd: ModuleType, kind: Kind) -> int:
    try:
        return int(sd.query_devices(kind=kind)["index"])
    except Exception:  # PortAudioError / ValueError: there is no default of this kind
        return -1


def list_devices() -> list[DeviceInfo]:
    """All devices PortAudio knows (empty when there are none; not an error here)."""
    sd = _sd()
    try:
        raw = sd.query_devices()
        hostapis = sd.query_hostapis()
    except sd.PortAudioError as exc:
        raise MissingDependency(f"cannot query audio devices: {exc}") from exc
    default_in = _default_index(sd, "input")
    default_out = _default_index(sd, "output")
    devices = []
    for dev in raw:
        index = int(dev["index"])
        devices.append(
            DeviceInfo(
                index=index,
                name=str(dev["name"]),
                hostapi=str(hostapis[dev["hostapi"]]["name"]),
                max_input_channels=int(dev["max_input_channels"]),
                max_output_channels=int(dev["max_output_channels"]),
                default_samplerate=float(dev["default_samplerate"]),
                is_default_input=index == default_in,
                is_default_output=index == default_out,
            )
        )
    return devices


def resolve_device(spec: str | int | DeviceInfo | None, kind: Kind) -> DeviceInfo:
    """The device ``spec`` names: None = the default, an index, or a name substring.

    Names match case-insensitively as substrings among devices that have ``kind`` channels;
    an exact (case-insensitive) name wins over substring matches, so ``pulse`` is not
    ambiguous next to ``pulse monitor``. Every failure is one line: MissingDependency when
    there is no device at all, BadInput when ``spec`` names nothing usable.
    """
    if isinstance(spec, DeviceInfo):
        return spec
    devices = list_devices()
    usable = [d for d in devices if d.channels(kind) > 0]
    if not usable:
        raise MissingDependency(
            f"no audio {kind} device found: PortAudio sees no sound server (PulseAudio, "
            f"PipeWire) and no sound card"
        )
    if spec is None or (isinstance(spec, str) and spec.strip() in ("", "default")):
        for dev in usable:
            if dev.is_default_output if kind == "output" else dev.is_default_input:
                return dev
        return usable[0]
    text = spec.strip() if isinstance(spec, str) else None
    if isinstance(spec, int) or (text is not None and text.lstrip("-").isdigit()):
        index = int(spec)
        found = next((d for d in devices if d.index == index), None)
        if found is None:
            raise BadInput(f"no audio device with index {index}; {LIST_HINT}")
        if found.channels(kind) == 0:
            raise BadInput(f"audio device {index} ({found.name}) has no {kind} channels")
        return found
    assert text is not None
    needle = text.casefold()
    exact = [d for d in usable if d.name.casefold() == needle]
    if len(exact) == 1:
        return exact[0]
    matches = exact or [d for d in usable if needle in d.name.casefold()]
    if not matches:
        raise BadInput(f"no audio {kind} device matches {text!r}; {LIST_HINT}")
    if len(matches) > 1:
        names = ", ".join(f"{d.index} {d.name!r}" for d in matches)
        raise BadInput(f"audio {kind} device {text!r} is ambiguous ({names}); give an index")
    return matches[0]


def _choose_format(
    sd: ModuleType, dev: DeviceInfo, kind: Kind, rate: int, device_rate: int | None = None
) -> tuple[int, int]:
    """(device rate, channels) to open: the session rate and mono when the device takes them.

    Opening at the session rate avoids our own resampling (PulseAudio and ALSA's plug layer
    convert for free); a raw hardware device may only take its native rate or two channels,
    so we fall back to the device default rate (we resample) and <= 2 channels (we downmix
    or duplicate). ``device_rate`` forces the device rate (for devices that claim rates they
    do not really support, and for tests of the resampling path).
    """
    check = sd.check_input_settings if kind == "input" else sd.check_output_settings
    max_channels = dev.channels(kind)
    channel_options = [1] + ([2] if max_channels >= 2 else [])
    if device_rate is not None:
        rate_options = [device_rate]
    else:
        native = int(dev.default_samplerate)
        rate_options = [rate] if native == rate else [rate, native]
    last: Exception | None = None
    for candidate in rate_options:
        for channels in channel_options:
            try:
                check(device=dev.index, channels=channels, dtype="float32", samplerate=candidate)
            except Exception as exc:  # PortAudioError or ValueError: try the next option
                last = exc
                continue
            return candidate, channels
    raise BadInput(f"audio {kind} device {dev.index} ({dev.name}) cannot be used: {last}")


def _open_error(kind: Kind, dev: DeviceInfo, exc: Exception) -> BadInput:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    hint = " (busy? another program may hold it)" if "unavailable" in text.lower() else ""
    return BadInput(f"cannot open audio {kind} device {dev.index} ({dev.name}): {text}{hint}")


def _open_stream(
    kind: Kind,
    dev: DeviceInfo,
    rate: int,
    channels: int,
    block_ms: float,
    latency: Any,
    callback: Any,
) -> Any:
    """Open and start a float32 callback stream; any PortAudio refusal (busy, vanished,
    unsupported format) becomes one BadInput line naming the device."""
    sd = _sd()
    factory = sd.InputStream if kind == "input" else sd.OutputStream
    try:
        stream = factory(
            device=dev.index,
            samplerate=rate,
            channels=channels,
            dtype="float32",
            blocksize=max(1, round(rate * block_ms / 1000.0)),
            latency=latency,
            callback=callback,
        )
        stream.start()
    except Exception as exc:  # PortAudioError: busy, vanished, unsupported
        raise _open_error(kind, dev, exc) from exc
    return stream


# --- microphone -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CapturedBlock:
    """Mono float32 at the session rate ``rate``, with where it sits in time.

    ``t_capture``: monotonic seconds when the block's first sample reached the ADC (from
    PortAudio's ``inputBufferAdcTime``; the resampler's few-ms filter delay is ignored).
    ``t_received``: monotonic seconds when the callback handed it over (``t_received -
    t_capture`` is the capture latency). ``start_ms``: position on the microphone timeline
    (session-rate samples delivered before this block). ``overflow``: the device dropped
    input just before this block.
    """

    samples: np.ndarray
    rate: int
    t_capture: float
    t_received: float
    start_ms: float
    overflow: bool = False

    @property
    def duration_ms(self) -> float:
        return 1000.0 * self.samples.size / self.rate

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.duration_ms


_END = object()


class Microphone:
    """A callback input stream delivering mono session-rate blocks into an asyncio queue.

    Usage::

        async with Microphone("pulse", rate=16000) as mic:
            async for block in mic:
                ...

    The callback downmixes to mono and converts device rate -> session rate with one
    :class:`StreamResampler` (chunking-independent, so block sizes do not change the audio).
    The queue holds ``max_queue_ms`` of audio; when the consumer falls behind the oldest
    blocks are dropped and counted in ``dropped_blocks`` (a live microphone must not grow
    memory without bound, and stale audio is worthless to a live conversation).
    """

    def __init__(
        self,
        device: str | int | DeviceInfo | None = None,
        rate: int = 16000,
        block_ms: float = 20.0,
        *,
        latency: str | float = "low",
        max_queue_ms: float = 10_000.0,
        device_rate: int | None = None,
    ) -> None:
        if rate <= 0 or block_ms <= 0:
            raise BadInput("microphone rate and block_ms must be positive")
        self.device = resolve_device(device, "input")
        self.rate = rate
        self.block_ms = block_ms
        self._latency = latency
        self.device_rate, self.channels = _choose_format(
            _sd(), self.device, "input", rate, device_rate
        )
        self._resampler = StreamResampler(self.device_rate, rate)
        self._max_blocks = max(1, math.ceil(max_queue_ms / block_ms))
        self._queue: deque[CapturedBlock | object] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stream: Any = None
        self._position = 0  # session-rate samples delivered
        self._pending_overflow = False
        self.overflows = 0
        self.dropped_blocks = 0
        self.latency_s = 0.0

    # -- lifecycle --

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Open and start the stream; blocks are delivered on ``loop`` (default: running)."""
        if self._stream is not None:
            return
        self._loop = loop or asyncio.get_running_loop()
        stream = _open_stream(
            "input", self.device, self.device_rate, self.channels, self.block_ms,
            self._latency, self._callback,
        )  # fmt: skip
        self._stream = stream
        self.latency_s = float(stream.latency)

    def stop(self) -> None:
        """Stop capturing, deliver the resampler's tail, and end async iteration."""
        stream, self._stream = self._stream, None
        if stream is None:
            return
        with contextlib.suppress(Exception):
            stream.stop()
        with contextlib.suppress(Exception):
            stream.close()
        tail = self._resampler.process(np.zeros(0, dtype=np.float32), last=True)
        now = time.monotonic()
        if tail.size:
            self._deliver(
                CapturedBlock(tail, self.rate, now, now, 1000.0 * self._position / self.rate)
            )
            self._position += tail.size
        self._deliver(_END)

    async def __aenter__(self) -> Microphone:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    # -- audio thread --

    def _callback(self, indata: np.ndarray, frames: int, timeinfo: Any, status: Any) -> None:
        now = time.monotonic()
        if status and status.input_overflow:
            self.overflows += 1
            self._pending_overflow = True
        mono = indata[:, 0] if indata.shape[1] == 1 else indata.mean(axis=1)
        out = self._resampler.process(np.array(mono, dtype=np.float32, copy=True))
        if out.size == 0:
            return
        adc = float(timeinfo.inputBufferAdcTime)
        if adc > 0 and abs(float(timeinfo.currentTime) - adc) < _MAX_SANE_LATENCY_S:
            t_first_in = adc + (now - float(timeinfo.currentTime))
        else:  # host API gave no ADC time: assume the block just completed
            t_first_in = now - frames / self.device_rate
        # The resampled block ends where the input block ends (filter delay ignored).
        t_capture = t_first_in + frames / self.device_rate - out.size / self.rate
        block = CapturedBlock(
            out,
            self.rate,
            t_capture,
            now,
            1000.0 * self._position / self.rate,
            overflow=self._pending_overflow,
        )
        self._position += out.size
        self._pending_overflow = False
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # loop closed while the stream ran
                loop.call_soon_threadsafe(self._deliver, block)

    # -- loop thread --

    def _deliver(self, item: CapturedBlock | object) -> None:
        self._queue.append(item)
        while len(self._queue) > self._max_blocks and self._queue[0] is not _END:
            self._queue.popleft()
            self.dropped_blocks += 1
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def read(self) -> CapturedBlock | None:
        """The next block, or None once the microphone is stopped and drained."""
        while not self._queue:
            if self._stream is None and self._loop is None:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._queue.popleft()
        if item is _END:
            self._loop = None
            return None
        assert isinstance(item, CapturedBlock)
        return item

    def __aiter__(self) -> Microphone:
        return self

    async def __anext__(self) -> CapturedBlock:
        block = await self.read()
        if block is None:
            raise StopAsyncIteration
        return block


# --- speaker ----------------------------------------------------------------------------

StartedCallback = Callable[[str, float], None]
#: ``(samples, t_dac)``: a block handed to the device (mono, device rate, silence included)
#: and the monotonic DAC time of its first sample; called on the audio thread.
RenderTap = Callable[[np.ndarray, float], None]


@dataclass(frozen=True, slots=True)
class ResponseCounts:
    """What the speaker counted of one response: the per-response figures the simulated
    ``PlaybackClock`` keeps too (``received_ms``, ``underruns``, ``stall_ms``)."""

    received_ms: float  # audio ever queued for it (before any flush)
    underruns: int  # dry spells while it was live (not ended)
    stall_ms: float  # silence inserted in those spells


@dataclass(slots=True)
class _Mark:
    """``n`` frames of one response, from response frame ``start``, reach the DAC at ``t``."""

    t: float
    start: int
    n: int


@dataclass(slots=True)
class _Response:
    id: str
    resampler: StreamResampler | None
    queued: int = 0  # frames waiting in the jitter buffer
    handed: int = 0  # frames handed to the device
    playing: bool = False  # prebuffer satisfied, frames are flowing
    ended: bool = False  # end_response() called: running dry is the end, not a stall
    flushed: bool = False
    frozen_ms: float | None = None  # heard position at flush
    t_started: float | None = None  # monotonic DAC time of the first frame
    t_last_dac_end: float = 0.0  # monotonic DAC time just after the last handed frame
    t_flushed: float | None = None
    enqueued: int = 0  # device-rate frames ever queued (before any flush)
    underruns: int = 0
    stall_ms: float = 0.0
    marks: deque[_Mark] = field(default_factory=deque)


@dataclass(slots=True)
class _Segment:
    response: _Response
    data: np.ndarray
    offset: int = 0


class Speaker:
    """An output stream fed by a per-response jitter buffer; the device drives ``played_ms``.

    Same small interface as the simulated playback clock (``duplexctl.audio.playback``):
    ``played_ms(response_id) -> float`` and ``flush() -> dict[str, float]``; plus
    ``enqueue(response_id, samples)`` for real audio and ``end_response(response_id)`` so
    that a response running out of audio after its ``response.done`` is not an underrun.

    Responses play in enqueue order. A response starts once ``prebuffer_ms`` of it is queued
    (or it was ended with less); ``on_started(response_id, t_dac)`` then fires on the loop
    given to :meth:`start` with the monotonic DAC time of its first frame (P0). When the
    buffer runs dry while the playing response has not ended, that is an underrun: counted
    once per dry spell in ``underruns``, with the silence inserted added to ``stall_ms``.
    ``device_underflows`` counts what PortAudio itself reports. ``on_render`` sees every
    block exactly as the device gets it (an echo canceller's far end); it must not block.
    """

    def __init__(
        self,
        device: str | int | DeviceInfo | None = None,
        rate: int = 24000,
        *,
        block_ms: float = 10.0,
        prebuffer_ms: float = 0.0,
        latency: str | float = "low",
        on_started: StartedCallback | None = None,
        tail_s: float = 0.3,
        device_rate: int | None = None,
        on_render: RenderTap | None = None,
    ) -> None:
        if rate <= 0 or block_ms <= 0 or prebuffer_ms < 0:
            raise BadInput("speaker rate and block_ms must be positive, prebuffer_ms >= 0")
        self.device = resolve_device(device, "output")
        self.rate = rate
        self.block_ms = block_ms
        self.prebuffer_ms = prebuffer_ms
        self.on_started = on_started
        self.on_render = on_render
        self.tail_s = tail_s
        self._latency = latency
        self.device_rate, self.channels = _choose_format(
            _sd(), self.device, "output", rate, device_rate
        )
        self._prebuffer_frames = round(self.device_rate * prebuffer_ms / 1000.0)
        self._lock = threading.Lock()
        self._segments: deque[_Segment] = deque()
        self._responses: dict[str, _Response] = {}
        self._current: _Response | None = None  # last response that handed frames
        self._starved = False
        self._stream: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.output_latency_s = 0.0  # PortAudio's stated output latency for the stream
        self.underruns = 0
        self.stall_ms = 0.0
        self.device_underflows = 0
        self.dropped_after_flush_ms = 0.0

    # -- lifecycle --

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Open and start the output stream (silence until something is enqueued)."""
        if self._stream is not None:
            return
        if loop is None:
            with contextlib.suppress(RuntimeError):
                loop = asyncio.get_running_loop()
        self._loop = loop
        stream = _open_stream(
            "output", self.device, self.device_rate, self.channels, self.block_ms,
            self._latency, self._callback,
        )  # fmt: skip
        self._stream = stream
        self.output_latency_s = float(stream.latency)

    def close(self, *, wait_tail: bool = True) -> None:
        """Close the stream, first keeping it open ``output_latency_s + tail_s``.

        Closing right after the last callback loses the audio still inside the device
        buffers (docs/testing.md: keep an output stream open for its latency + 0.3 s). Does not
        wait for queued audio: use :meth:`drain` for that.
        """
        stream, self._stream = self._stream, None
        if stream is None:
            return
        if wait_tail:
            time.sleep(self.output_latency_s + self.tail_s)
        with contextlib.suppress(Exception):
            stream.stop()
        with contextlib.suppress(Exception):
            stream.close()

    async def aclose(self, *, drain: bool = True, timeout_s: float = 30.0) -> None:
        """Async close: optionally :meth:`drain` first, then wait the tail off the loop."""
        if drain:
            await self.drain(timeout_s)
        if self._stream is not None:
            await asyncio.sleep(self.output_latency_s + self.tail_s)
        self.close(wait_tail=False)

    async def drain(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything queued has been handed over and reached the DAC."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                busy = bool(self._segments) or any(
                    r.t_last_dac_end > time.monotonic() for r in self._responses.values()
                )
            if not busy:
                return True
            await asyncio.sleep(0.01)
        return False

    async def __aenter__(self) -> Speaker:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose(drain=exc[0] is None)

    # -- producer side (loop thread) --

    def enqueue(self, response_id: str, samples: np.ndarray) -> None:
        """Queue mono float32 samples at the session rate for ``response_id``.

        Audio for a response that was flushed is dropped (a late delta of a cancelled
        response must not be heard) and counted in ``dropped_after_flush_ms``.
        """
        data = np.asarray(samples, dtype=np.float32).reshape(-1)
        with self._lock:
            resp = self._responses.get(response_id)
            if resp is None:
                resampler = (
                    StreamResampler(self.rate, self.device_rate)
                    if self.device_rate != self.rate
                    else None
                )
                resp = self._responses[response_id] = _Response(response_id, resampler)
            if resp.flushed:
                self.dropped_after_flush_ms += 1000.0 * data.size / self.rate
                return
            if resp.ended:
                resp.ended = False  # more audio after end_response(): keep playing it
        if resp.resampler is not None:
            data = resp.resampler.process(data)
        if data.size:
            self._push(resp, data)

    def end_response(self, response_id: str) -> None:
        """No more audio will come for ``response_id`` (its ``response.done`` arrived)."""
        with self._lock:
            resp = self._responses.get(response_id)
            if resp is None or resp.flushed:
                return
        if resp.resampler is not None:
            tail = resp.resampler.process(np.zeros(0, dtype=np.float32), last=True)
            if tail.size:
                self._push(resp, tail)
        with self._lock:
            resp.ended = True

    def _push(self, resp: _Response, data: np.ndarray) -> None:
        with self._lock:
            if resp.flushed:
                return
            self._segments.append(_Segment(resp, data))
            resp.queued += data.size
            resp.enqueued += data.size

    # -- audio thread --

    def _callback(self, outdata: np.ndarray, frames: int, timeinfo: Any, status: Any) -> None:
        now = time.monotonic()
        offset = now - float(timeinfo.currentTime)
        dac = float(timeinfo.outputBufferDacTime)
        current = float(timeinfo.currentTime)
        if dac > 0 and 0.0 <= dac - current < _MAX_SANE_LATENCY_S:
            t_dac = dac + offset
        else:  # no usable DAC time from the host API: use the stream's stated latency
            t_dac = now + self.output_latency_s
        if status and status.output_underflow:
            self.device_underflows += 1
        out = np.zeros(frames, dtype=np.float32)
        started: list[tuple[str, float]] = []
        filled = 0
        with self._lock:
            while filled < frames and self._segments:
                seg = self._segments[0]
                resp = seg.response
                if not resp.playing:
                    if resp.queued < self._prebuffer_frames and not resp.ended:
                        break  # still prebuffering this response
                    resp.playing = True
                if resp.t_started is None:
                    resp.t_started = t_dac + filled / self.device_rate
                    started.append((resp.id, resp.t_started))
                n = min(frames - filled, seg.data.size - seg.offset)
                out[filled : filled + n] = seg.data[seg.offset : seg.offset + n]
                t_mark = t_dac + filled / self.device_rate
                resp.marks.append(_Mark(t_mark, resp.handed, n))
                while len(resp.marks) > 1 and resp.marks[1].t <= now:
                    resp.marks.popleft()
                resp.handed += n
                resp.queued -= n
                resp.t_last_dac_end = t_mark + n / self.device_rate
                seg.offset += n
                filled += n
                self._current = resp
                if seg.offset >= seg.data.size:
                    self._segments.popleft()
            cur = self._current
            if filled < frames and cur is not None and not cur.ended and not cur.flushed:
                stall = 1000.0 * (frames - filled) / self.device_rate
                if not self._starved:
                    self.underruns += 1
                    cur.underruns += 1
                    self._starved = True
                self.stall_ms += stall
                cur.stall_ms += stall
            elif filled == frames:
                self._starved = False
        outdata[:] = out[:, None]
        if self.on_render is not None:
            self.on_render(out, t_dac)
        if started and self.on_started is not None and self._loop is not None:
            for rid, t0 in started:
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self.on_started, rid, t0)

    # -- playback position --

    def _played_frames(self, resp: _Response, now: float) -> float:
        """Frames of ``resp`` whose DAC time is <= ``now`` (interpolated within a mark)."""
        marks = resp.marks
        while len(marks) > 1 and marks[1].t <= now:
            marks.popleft()
        if not marks:
            return float(resp.handed)
        mark = marks[0]
        if mark.t > now:
            return float(mark.start)
        return mark.start + min(float(mark.n), (now - mark.t) * self.device_rate)

    def played_ms(self, response_id: str) -> float:
        """Ms of ``response_id`` that has come out of the device so far (frozen at a flush)."""
        with self._lock:
            resp = self._responses.get(response_id)
            if resp is None:
                return 0.0
            if resp.frozen_ms is not None:
                return resp.frozen_ms
            return 1000.0 * self._played_frames(resp, time.monotonic()) / self.device_rate

    def counts(self, response_id: str) -> ResponseCounts:
        """Received audio, underruns and stall of ``response_id`` (zeros if unknown)."""
        with self._lock:
            resp = self._responses.get(response_id)
            if resp is None:
                return ResponseCounts(0.0, 0, 0.0)
            received_ms = 1000.0 * resp.enqueued / self.device_rate
            return ResponseCounts(received_ms, resp.underruns, resp.stall_ms)

    def started_at(self, response_id: str) -> float | None:
        """Monotonic DAC time of the response's first frame (P0), None before it plays."""
        with self._lock:
            resp = self._responses.get(response_id)
            return None if resp is None else resp.t_started

    def queued_ms(self, response_id: str | None = None) -> float:
        """Audio waiting in the jitter buffer (one response, or all)."""
        with self._lock:
            if response_id is None:
                frames = sum(s.data.size - s.offset for s in self._segments)
            else:
                resp = self._responses.get(response_id)
                frames = 0 if resp is None else resp.queued
        return 1000.0 * frames / self.device_rate

    def flush(self, response_id: str | None = None, *, hard: bool = True) -> dict[str, float]:
        """Barge-in: drop everything queued and return the heard position per response.

        The returned map covers responses that still had audio queued or in flight (only
        ``response_id`` when given); their ``played_ms`` freezes at that value and later
        audio for them is dropped. With ``hard`` (default) the stream is aborted and
        restarted, which discards what is already inside the device buffers, so output stops
        at once and the heard position is exactly what reached the DAC (measured on the
        PulseAudio null sink: silence within a few ms, abort+restart ~2 ms). With
        ``hard=False`` those frames (about one output latency) still play, and the heard
        position includes them. A hard flush of one response while another response's
        frames are in the device falls back to soft (aborting would cut the other one).
        """
        now = time.monotonic()
        heard: dict[str, float] = {}
        with self._lock:
            targets = [
                r
                for r in self._responses.values()
                if r.frozen_ms is None
                and (response_id is None or r.id == response_id)
                and (r.queued > 0 or r.t_last_dac_end > now)
            ]
            hard = hard and not any(
                r.t_last_dac_end > now and r.frozen_ms is None and r not in targets
                for r in self._responses.values()
            )
            for resp in targets:
                frames = self._played_frames(resp, now) if hard else float(resp.handed)
                resp.frozen_ms = 1000.0 * frames / self.device_rate
                resp.t_flushed = now if hard else max(now, resp.t_last_dac_end)
                resp.flushed = True
                resp.queued = 0
                resp.marks.clear()
                heard[resp.id] = resp.frozen_ms
            self._segments = deque(s for s in self._segments if not s.response.flushed)
            self._starved = False
        stream = self._stream
        if hard and stream is not None and heard:
            try:
                stream.abort()
                stream.start()
            except Exception as exc:  # the device vanished mid-conversation
                raise _open_error("output", self.device, exc) from exc
        return heard

    def end_time(self, response_id: str) -> float | None:
        """When everything of ``response_id`` received so far has played (monotonic s; None:
        not started, or flushed before it was)."""
        with self._lock:
            resp = self._responses.get(response_id)
            if resp is None:
                return None
            if resp.t_flushed is not None:
                return resp.t_flushed if resp.t_started is not None else None
            if resp.t_started is None:
                return None
            return resp.t_last_dac_end + resp.queued / self.device_rate
