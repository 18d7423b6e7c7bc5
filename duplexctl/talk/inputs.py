"""The user's side of a live conversation: timestamped blocks of mono audio.

A microphone and ``--input-file`` go through one path (level meter, barge-in detector,
appends, recorder), so a test fed from a WAV exercises exactly what a person talking does.
For that the file input imitates a microphone, not the replay pacer: block ``k`` covers
``[k*b, (k+1)*b)`` of the user timeline and is delivered at ``t0 + (k+1)*b`` — when a real
microphone would have finished capturing it — with ``t_capture = t0 + k*b``. (The replay
pacer sends a chunk at the *start* of its span, which is right for scripted replays but would
make the file input a block ahead of any microphone.) The schedule is absolute, so wakeup
lateness does not accumulate; after the last file, silence keeps flowing like an open mic.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from duplexctl.audio.pacer import MicQueue, Placement
from duplexctl.audio.source import AudioClip


@dataclass(frozen=True, slots=True)
class InputBlock:
    """``samples`` (float32 mono at the session input rate) starting at ``start_ms`` of the
    user timeline, whose first sample was captured at ``t_capture`` (monotonic seconds)."""

    samples: np.ndarray
    start_ms: float
    t_capture: float

    def time_of(self, u_ms: float, rate: int) -> float:
        """Monotonic time at which user-timeline position ``u_ms`` (inside or near this
        block) was captured."""
        return self.t_capture + (u_ms - self.start_ms) / 1000.0


class InputSource(Protocol):
    rate: int
    description: str

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def blocks(self) -> AsyncIterator[InputBlock]: ...


class MicInput:
    """A real microphone (``duplexctl.audio.devices.Microphone``), as InputBlocks.

    The device is resolved and its format checked in the constructor, so a missing PortAudio
    or a bad ``--input-device`` fails before any connection is made.
    """

    def __init__(self, device: str | None, rate: int, block_ms: int) -> None:
        from duplexctl.audio.devices import Microphone

        self.rate = rate
        self.mic = Microphone(device, rate=rate, block_ms=block_ms)
        dev = self.mic.device
        self.description = f"microphone {dev.index} {dev.name} @ {self.mic.device_rate} Hz"

    def start(self) -> None:
        self.mic.start()

    def stop(self) -> None:
        self.mic.stop()

    async def blocks(self) -> AsyncIterator[InputBlock]:
        async for block in self.mic:
            yield InputBlock(block.samples, block.start_ms, block.t_capture)


class FileInput:
    """WAV files fed in real time as if spoken, then silence (see the module docstring).

    ``clip_ends_ms`` lists where each file ends on the user timeline: push-to-talk uses them
    as the moments the (virtual) user presses Enter.
    """

    def __init__(
        self, clips: list[tuple[AudioClip, float | None]], rate: int, block_ms: int
    ) -> None:
        self.rate = rate
        self.block_ms = block_ms
        self.block_samples = rate * block_ms // 1000
        self.queue = MicQueue(rate)
        self.placements: list[tuple[AudioClip, Placement]] = []
        for clip, at_s in clips:
            at_ms = None if at_s is None else at_s * 1000.0
            try:
                placement = self.queue.play(clip.samples, at_ms=at_ms)
            except ValueError as exc:
                from duplexctl.errors import BadInput

                raise BadInput(f"--input-file {clip.path}: {exc}") from None
            self.placements.append((clip, placement))
        names = ", ".join(f"{clip.name}@{p.start_ms / 1000:g}s" for clip, p in self.placements)
        self.description = f"input file(s) {names}, then silence"
        self.t0: float | None = None
        self._stopped = False

    @property
    def clip_ends_ms(self) -> list[float]:
        return [p.end_ms for _, p in self.placements]

    def start(self) -> None:
        self.t0 = time.monotonic()

    def stop(self) -> None:
        self._stopped = True

    async def blocks(self) -> AsyncIterator[InputBlock]:
        if self.t0 is None:
            self.start()
        assert self.t0 is not None
        k = 0
        step = self.block_ms / 1000.0
        while not self._stopped:
            due = self.t0 + (k + 1) * step
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if self._stopped:
                return
            samples, _, _ = self.queue.read(self.block_samples)
            yield InputBlock(np.array(samples, copy=True), k * self.block_ms, self.t0 + k * step)
            k += 1
