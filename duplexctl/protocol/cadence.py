"""The input cadence a lane wants: how long each ``input_audio_buffer.append`` may be
(docs/protocol.md §13.1).

A frame-locked model (NVIDIA Nemotron VoiceChat in vLLM-Omni 0.30) advances one model step
per fixed frame of input (``capabilities.chunk_period_ms``, 80 ms) and refuses an append
longer than one frame (``bad_event`` "… must contain at most 1280 samples"). Appends that are
exactly one frame long work, but a frame sent a few ms late lets the server insert a frame of
silence of its own (15–20 % extra model frames observed): packets *smaller* than a frame keep
a partial frame always pending, so nothing is inserted. So the rule, decided here once for
replay, load and talk:

* the lane's step is ``chunk_period_ms`` (when the server states one), or what a refusal of
  an oversized append says (``at most N samples`` at the lane's 16 kHz), whichever is
  smaller;
* an append asked for that is **at least one step** long becomes a sub-frame packet: half
  the step (a quarter, … when half is not a whole number of samples at the input rate), at
  least :data:`MIN_PACKET_MS`;
* an append shorter than the step is kept as asked (the lane buffers partial frames).

Pure: the shells ask :func:`packet_ms` when the session opens and again when a refusal
taught something new (:func:`refused_samples`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from duplexctl.protocol.errors import WireError

#: the sample rate the lane counts its frames in (vLLM-Omni converts every input to it)
LANE_RATE: Final = 16000
#: no packet shorter than this (each append costs a frame of JSON and base64)
MIN_PACKET_MS: Final = 10
_AT_MOST: Final = re.compile(r"at most (\d+) samples")


def frame_ms(capabilities: dict[str, Any]) -> int | None:
    """The lane's model step in ms (``chunk_period_ms``), or None when not stated."""
    value = capabilities.get("chunk_period_ms")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return int(value)


def refused_samples(error: WireError) -> int | None:
    """N of an append refused for being longer than ``at most N samples``, else None."""
    if error.code != "bad_event" or not error.message:
        return None
    match = _AT_MOST.search(error.message)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class Cadence:
    """What :func:`packet_ms` decided: the packet length and, when it is not what was
    asked for, why (one line for the run's notes)."""

    packet_ms: int
    step_ms: float | None
    note: str | None = None


def _whole(ms: float, rate: int) -> bool:
    return ms == int(ms) and rate * int(ms) % 1000 == 0


def packet_ms(
    asked_ms: int,
    rate: int,
    *,
    step_ms: int | None,
    max_samples: int | None = None,
    asked_by: str = "chunk_ms",
) -> Cadence:
    """The append length to use for ``asked_ms`` at input ``rate`` on a lane whose step is
    ``step_ms`` and which refused appends over ``max_samples`` (see the module docstring)."""
    limits = [float(step_ms)] if step_ms else []
    if max_samples:
        limits.append(max_samples * 1000.0 / LANE_RATE)
    if not limits:
        return Cadence(asked_ms, None)
    step = min(limits)
    if asked_ms < step:
        return Cadence(asked_ms, step)
    size = step / 2
    while size >= MIN_PACKET_MS and not _whole(size, rate):
        size /= 2
    if size < MIN_PACKET_MS:
        return Cadence(asked_ms, step)  # no whole-sample sub-frame: keep what was asked
    chosen = int(size)
    why = (
        f"the server refused appends over {max_samples} samples"
        if max_samples and step == max_samples * 1000.0 / LANE_RATE and step != step_ms
        else f"the lane steps every {step:g} ms (chunk_period_ms)"
    )
    note = (
        f"{asked_by} {asked_ms} sent as {chosen} ms packets: {why}, and packets shorter "
        "than a step keep the server from inserting silence frames of its own"
    )
    return Cadence(chosen, step, note)
