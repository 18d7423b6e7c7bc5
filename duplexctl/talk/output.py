"""The assistant's side: where response audio is played, and the clock that says how much.

Two implementations of one small interface, because the rest of the loop must not care:

* :class:`DeviceOutput` — a real speaker (``duplexctl.audio.devices.Speaker``). The output
  device drives the playback clock (docs/metrics.md): ``played_ms`` is what reached the DAC,
  never what was received or enqueued, and a flush aborts the stream so sound stops at once.
* :class:`SimulatedOutput` — ``--output-device none``: no sound card, the simulated jitter
  buffer of ``audio/playback.py`` (P0 = first receive + prebuffer, real time). Lets ``talk``
  run on a machine without PortAudio (CI, a server box) with honest acks all the same.

Responses play in arrival order; the loop never mixes two.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from duplexctl.audio.playback import PlaybackClock

StartedCallback = Callable[[str, float], None]


class Output(Protocol):
    rate: int
    description: str

    def start(self) -> None: ...
    def enqueue(self, response_id: str, samples: np.ndarray) -> None: ...
    def end(self, response_id: str) -> None: ...
    def played_ms(self, response_id: str) -> float: ...
    def flush(self, response_id: str | None = None) -> dict[str, float]: ...
    def started_at(self, response_id: str) -> float | None: ...
    def end_time(self, response_id: str) -> float | None: ...
    def busy(self) -> bool: ...
    async def aclose(self, *, drain: bool) -> None: ...


class DeviceOutput:
    """A speaker; see the module docstring. Constructing it resolves the device and checks
    the format (one-line MissingDependency / BadInput before any connection)."""

    def __init__(
        self,
        device: str | None,
        rate: int,
        *,
        prebuffer_ms: float = 0.0,
        on_started: StartedCallback | None = None,
    ) -> None:
        from duplexctl.audio.devices import Speaker

        self.rate = rate
        self.speaker = Speaker(device, rate=rate, prebuffer_ms=prebuffer_ms, on_started=on_started)
        self.device_rate = self.speaker.device_rate
        dev = self.speaker.device
        self.description = f"speaker {dev.index} {dev.name} @ {self.speaker.device_rate} Hz"
        self._live: set[str] = set()

    def start(self) -> None:
        self.speaker.start()

    def enqueue(self, response_id: str, samples: np.ndarray) -> None:
        self._live.add(response_id)
        self.speaker.enqueue(response_id, samples)

    def end(self, response_id: str) -> None:
        self.speaker.end_response(response_id)

    def played_ms(self, response_id: str) -> float:
        return self.speaker.played_ms(response_id)

    def flush(self, response_id: str | None = None) -> dict[str, float]:
        heard = self.speaker.flush(response_id)
        self._live.difference_update(heard)
        return heard

    def started_at(self, response_id: str) -> float | None:
        return self.speaker.started_at(response_id)

    def end_time(self, response_id: str) -> float | None:
        return self.speaker.end_time(response_id)

    def busy(self) -> bool:
        """Some response is audible, in the device, or waiting in the jitter buffer."""
        now = time.monotonic()
        for rid in list(self._live):
            if self.speaker.queued_ms(rid) > 0:
                return True
            end = self.end_time(rid)
            if end is not None and end > now:
                return True
            if end is not None:
                self._live.discard(rid)
        return False

    async def aclose(self, *, drain: bool) -> None:
        await self.speaker.aclose(drain=drain, timeout_s=10.0)


class SimulatedOutput:
    """No device: one :class:`PlaybackClock` per response, played back to back."""

    description = "no speaker (simulated playback clock)"

    def __init__(
        self,
        rate: int,
        *,
        prebuffer_ms: float = 0.0,
        on_started: StartedCallback | None = None,
    ) -> None:
        self.rate = rate
        self.prebuffer_ms = prebuffer_ms
        self.on_started = on_started
        self.clocks: dict[str, PlaybackClock] = {}

    def start(self) -> None:
        pass

    def enqueue(self, response_id: str, samples: np.ndarray) -> None:
        now = time.monotonic()
        clock = self.clocks.get(response_id)
        if clock is None:
            clock = self.clocks[response_id] = PlaybackClock(self.prebuffer_ms)
        first = clock.first_audible is None
        clock.receive(now, 1000.0 * samples.size / self.rate)
        if first and clock.first_audible is not None and self.on_started is not None:
            self.on_started(response_id, clock.first_audible)

    def end(self, response_id: str) -> None:
        pass

    def played_ms(self, response_id: str) -> float:
        clock = self.clocks.get(response_id)
        return 0.0 if clock is None else clock.played_ms(time.monotonic())

    def flush(self, response_id: str | None = None) -> dict[str, float]:
        now = time.monotonic()
        heard: dict[str, float] = {}
        for rid, clock in self.clocks.items():
            if response_id is not None and rid != response_id:
                continue
            if clock.flushed_at is None and not clock.done_playing(now):
                heard[rid] = clock.flush(now)
        return heard

    def started_at(self, response_id: str) -> float | None:
        clock = self.clocks.get(response_id)
        return None if clock is None else clock.first_audible

    def end_time(self, response_id: str) -> float | None:
        clock = self.clocks.get(response_id)
        return None if clock is None else clock.end_time()

    def busy(self) -> bool:
        now = time.monotonic()
        return any(c.flushed_at is None and not c.done_playing(now) for c in self.clocks.values())

    async def aclose(self, *, drain: bool) -> None:
        pass
