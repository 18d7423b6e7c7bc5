"""The simulated model and the simulated GPU, honest about time.

Nothing here pretends to be fast: a reply's first audio arrives ``ttfa_ms`` (+ uniform jitter
in ``[0, ttfa_jitter_ms]``, seeded by ``config.seed``, + the ``latency-ms`` fault) after the
turn is submitted, and each output unit of ``chunk_ms`` is released when its predecessor
would have finished playing (``realtime_factor`` 1) or as soon as it is computed (0).

The GPU is shared by every session of a server (the transport builds one
:class:`SimulatedGpu` and hands it to each EngineSession). It has ``gpu_slots`` batch slots
(0 = unlimited); every output unit holds a slot for ``unit_compute_ms × load``, where the
load factor models batch slow-down: ``load = 1 + 0.1 × (busy − 1)`` with ``busy`` the number
of slots in use when the unit starts (1 busy slot → ×1.0, 4 → ×1.3). When all slots are busy
units queue, so time to first audio grows and the real-time factor (compute time per second
of audio) crosses 1 as sessions are added — the effect a load test must be able to see.

The model's reactions of ``--behaviour`` ride on the same slots (:meth:`SimulatedGpu.
finish_by`): the first unit of an answer at ``response-gap-ms``, and the unit in which the
model notices an interruption and stops at ``stop-latency-ms``, are each one unit timed to
finish at the configured instant on an idle GPU. The configured value is the floor; a unit
that waits for a slot (or is slowed by a full batch) lands that much later, so behaviour
degrades when the server saturates, as a real model's does.
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from duplexctl.audio import pcm
from duplexctl.audio.resample import resample
from duplexctl.server.config import ServerConfig

OUTPUT_RATE = 24000
TONE_HZ = 440.0
TONE_LEVEL = 0.3


def load_factor(busy: int) -> float:
    """Batch slow-down with ``busy`` occupied slots (documented in the module docstring)."""
    return 1.0 + 0.1 * max(0, busy - 1)


class RequestObserver(Protocol):
    """Told about each reply the GPU computes (``server/metrics.py`` turns it into /metrics)."""

    def first_output(self, seconds: float) -> None: ...
    def finished(self, queue_s: float, e2e_s: float, reason: str) -> None: ...
    def audio_finished(self, submitted_at: float, sent: list[tuple[float, float]]) -> None:
        """The reply's units as released: (monotonic s, audio ms) each, in order."""


class SimulatedGpu:
    """Batch slots shared by all sessions; output units queue when they are all busy."""

    def __init__(self, config: ServerConfig) -> None:
        self.slots = max(0, int(config.gpu_slots))
        self.unit_compute_ms = max(0.0, float(config.unit_compute_ms))
        self._sem: asyncio.Semaphore | None = (
            asyncio.Semaphore(self.slots) if self.slots > 0 else None
        )
        self.busy = 0
        self.queued = 0
        # replies between their submission and their last unit (or their cut): what a vLLM
        # scheduler counts as running, also when the slots are unlimited (busy stays 0 then)
        self.replies = 0
        self.units = 0
        self.compute_ms_total = 0.0
        self.wait_ms_total = 0.0
        self.observer: RequestObserver | None = None

    @property
    def running(self) -> int:
        """Requests running: replies in progress that are not waiting for a slot, and at
        least the slots computing (a unit run on its own, outside a reply, holds one)."""
        return max(self.busy, self.replies - self.queued)

    def kv_usage(self, capacity: int) -> float:
        """KV-cache usage: running requests over the cache's capacity in requests (the
        slots, or with unlimited slots ``capacity``: the admission limit), at most 1."""
        room = self.slots or capacity
        return min(1.0, self.running / room) if room > 0 else 0.0

    def asks_at(self, at: float) -> float:
        """When a unit that must finish at monotonic ``at`` asks for its slot: one idle
        unit's compute time before it."""
        return at - self.unit_compute_ms / 1000.0

    async def finish_by(self, at: float) -> tuple[float, float]:
        """One unit timed to finish at monotonic ``at`` on an idle GPU: it asks for its slot
        at :meth:`asks_at` (at once if that has passed) and, done early, waits for ``at``.
        Returns (ms waited for the slot, ms computed), as :meth:`run_unit`; the unit ends at
        ``at`` + its wait + its batch slow-down, never before ``at``."""
        await asyncio.sleep(max(0.0, self.asks_at(at) - time.monotonic()))
        waited, ms = await self.run_unit()
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        return waited, ms

    async def run_unit(self) -> tuple[float, float]:
        """Occupy a slot for one output unit; returns (ms waited for the slot, ms computed)."""
        if self.unit_compute_ms <= 0:
            self.units += 1
            return 0.0, 0.0
        start = time.monotonic()
        self.queued += 1
        try:
            if self._sem is not None:
                await self._sem.acquire()
        finally:
            self.queued -= 1
        waited = (time.monotonic() - start) * 1000.0
        self.busy += 1
        try:
            ms = self.unit_compute_ms * load_factor(self.busy)
            await asyncio.sleep(ms / 1000.0)
        finally:
            self.busy -= 1
            if self._sem is not None:
                self._sem.release()
        self.units += 1
        self.compute_ms_total += ms
        self.wait_ms_total += waited
        return waited, ms


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """One output unit as produced: float32 samples at 24 kHz and its end position."""

    index: int
    samples: np.ndarray
    end_ms: int
    last: bool


def reply_text(turn: int, epoch: int) -> str:
    return f"This is the duplexctl reference server answering turn {turn} (epoch {epoch})."


def tone(seconds: float, rate: int = OUTPUT_RATE) -> np.ndarray:
    """A 440 Hz tone with 5 ms fades (so chunk edges and cuts do not click)."""
    n = max(0, round(seconds * rate))
    t = np.arange(n, dtype=np.float64) / rate
    out = (TONE_LEVEL * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.float32)
    fade = min(n // 2, rate // 200)
    if fade:
        ramp = np.linspace(0.0, 1.0, fade, dtype=np.float32)
        out[:fade] *= ramp
        out[-fade:] *= ramp[::-1]
    return out


def encode_chunk(samples: np.ndarray, fmt: str, rate: int | None) -> tuple[str, str, int]:
    """24 kHz float samples → (base64 payload, wire format name, sample rate)."""
    if fmt in ("g711_ulaw", "g711_alaw"):
        out_rate = rate or 8000
        data = pcm.encode(resample(samples, OUTPUT_RATE, out_rate), fmt)
        return pcm.b64encode(data), fmt, out_rate
    out_rate = rate or OUTPUT_RATE
    body = resample(samples, OUTPUT_RATE, out_rate) if out_rate != OUTPUT_RATE else samples
    if fmt == "pcm_f32le":
        return pcm.b64encode(pcm.encode(body, fmt)), fmt, out_rate
    raw = pcm.encode(body, "pcm16")
    if fmt == "wav":
        header = struct.pack(
            "<4sI4s4sIHHIIHH4sI",
            b"RIFF",
            36 + len(raw),
            b"WAVE",
            b"fmt ",
            16,
            1,
            1,
            out_rate,
            out_rate * 2,
            2,
            16,
            b"data",
            len(raw),
        )
        return pcm.b64encode(header + raw), "wav", out_rate
    return pcm.b64encode(raw), "pcm16", out_rate


class SimulatedModel:
    """One session's model: what it says, and when each unit of it is ready."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._rng = random.Random(config.seed)
        fault = config.fault("latency-ms")
        self.latency_ms = float(fault.value or 0.0) if fault is not None else 0.0

    def reply_audio(self, user_audio: np.ndarray | None) -> np.ndarray:
        """The reply at 24 kHz: a tone, or the user's utterance played back."""
        if self.config.voice == "echo" and user_audio is not None and user_audio.size:
            return resample(user_audio, 16000, OUTPUT_RATE).astype(np.float32)
        return tone(self.config.reply_seconds)

    def ttfa_s(self) -> float:
        jitter = (
            self._rng.uniform(0.0, self.config.ttfa_jitter_ms)
            if self.config.ttfa_jitter_ms > 0
            else 0.0
        )
        return max(0.0, self.config.ttfa_ms + jitter + self.latency_ms) / 1000.0

    def chunk_period_s(self) -> float:
        return (
            max(0.0, self.config.chunk_ms * self.config.realtime_factor + self.latency_ms) / 1000.0
        )

    async def stream(
        self,
        audio: np.ndarray,
        gpu: SimulatedGpu,
        *,
        submitted_at: float,
        first_audio_at: float | None = None,
    ) -> AsyncIterator[OutputChunk]:
        """Yield the reply unit by unit, each when it is computed and due.

        The first unit waits for the time to first audio and then for its GPU slot; unit k
        is due ``k × chunk period`` after the first, or later if the GPU is behind.
        ``first_audio_at`` (the ``response-gap-ms`` behaviour) replaces the time to first
        audio with an instant of its own, which the first unit is timed to finish by (the
        rule of :meth:`SimulatedGpu.finish_by`: later only by its wait for a slot).
        """
        step = max(1, int(OUTPUT_RATE * self.config.chunk_ms / 1000))
        total = audio.size
        n_units = max(1, -(-total // step))
        loop_time = time.monotonic
        if first_audio_at is None:
            asks = submitted_at + self.ttfa_s()
        else:
            asks = gpu.asks_at(first_audio_at)
        first_at = 0.0
        period = self.chunk_period_s()
        observer = gpu.observer
        queued_ms = 0.0
        sent: list[tuple[float, float]] = []  # (released at, audio ms): the server's continuity
        reason = "abort"  # unless every unit is yielded: the reply was cut or its session ended
        gpu.replies += 1  # running from its submission: the time to first audio is its prefill
        try:
            await asyncio.sleep(max(0.0, asks - loop_time()))
            for index in range(n_units):
                waited, _ = await gpu.run_unit()
                queued_ms += waited
                if index == 0:
                    if first_audio_at is not None:  # done early: the gap is the floor
                        await asyncio.sleep(max(0.0, first_audio_at - loop_time()))
                    first_at = loop_time()
                    if observer is not None:
                        observer.first_output(first_at - submitted_at)
                elif period > 0:
                    await asyncio.sleep(max(0.0, first_at + index * period - loop_time()))
                chunk = audio[index * step : (index + 1) * step]
                end = min(total, (index + 1) * step)
                sent.append((loop_time(), chunk.size * 1000 / OUTPUT_RATE))
                yield OutputChunk(
                    index=index,
                    samples=chunk,
                    end_ms=round(end * 1000 / OUTPUT_RATE),
                    last=index == n_units - 1,
                )
            reason = "stop"
        finally:
            gpu.replies -= 1
            if observer is not None:
                observer.finished(queued_ms / 1000.0, loop_time() - submitted_at, reason)
                if sent:
                    observer.audio_finished(submitted_at, sent)
