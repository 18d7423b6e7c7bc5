"""Frame accounting on a frame-locked lane (docs/metrics.md "Frame accounting").

On a lane whose model takes one step per fixed frame of input (``chunk_period_ms``: Nemotron
VoiceChat in vLLM-Omni 0.30, 80 ms), every input frame the server takes yields exactly one
output packet of the same length, voice or silence (docs/protocol.md §13.2). So a client can
hold the server to account: the frames it sent, the frames that came back, and at the end of
the call the difference — frames the server never answered (a **deficit**: dropped, lost to a
stall, or cut by a cancel while in flight) or answered more than once (**inserted**: vLLM-Omni
feeds a frame of silence of its own when the client's next frame is late, and each such frame
comes back as a packet too). vLLM-Omni's own paced driver once hid a 5-frame deficit over a
28 s stream behind a bare assertion (vllm-project/vllm-omni#7428); here the numbers are kept.

Counted the way vLLM-Omni's frame buffer counts (``NemotronVoiceChatPcmAppendBuffer``): input
is cut into whole frames as it arrives; a commit pads a pending partial frame into one frame
(nothing when no partial frame is pending); a clear of the input buffer discards the partial
frame. Output frames are the audio received divided by the frame length (rounded to whole
frames), whatever response it belonged to and whether or not it was played.

Pure arithmetic, fed by the shells: :meth:`FrameLedger.sent` after each append went out,
:meth:`~FrameLedger.committed` / :meth:`~FrameLedger.cleared` by the event builders,
:meth:`~FrameLedger.received` by the client state for every audio delta.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

#: microseconds: the ledger counts input in whole µs so that 20 ms packets add up exactly
_US: Final = 1000


@dataclass(slots=True)
class FrameLedger:
    """One session's frames in and out on a lane of ``frame_ms`` frames.

    :meth:`sent` runs for every append of every session (on any lane that states a step,
    before it is known to be frame-locked), so it only adds: the input since the last commit
    or clear is cut into frames when asked (:attr:`frames_sent`)."""

    frame_ms: int
    received_ms: float = 0.0
    commits_padded: int = 0
    _closed_frames: int = 0  # frames of the input before the last commit or clear
    _open_us: int = 0  # input since then, in µs

    def sent(self, audio_ms: float) -> None:
        """An append of ``audio_ms`` of input went out."""
        self._open_us += round(audio_ms * _US)

    def committed(self) -> None:
        """``input_audio_buffer.commit``: a pending partial frame becomes a frame of its own."""
        whole, partial = divmod(self._open_us, self.frame_ms * _US)
        self._closed_frames += whole + (partial > 0)
        self.commits_padded += partial > 0
        self._open_us = 0

    def cleared(self) -> None:
        """``input_audio_buffer.clear``: the pending partial frame is discarded."""
        self._closed_frames += self._open_us // (self.frame_ms * _US)
        self._open_us = 0

    @property
    def frames_sent(self) -> int:
        """Whole frames of input sent (a commit's padded frame included)."""
        return self._closed_frames + self._open_us // (self.frame_ms * _US)

    def received(self, audio_ms: float) -> None:
        """An output packet of ``audio_ms`` arrived."""
        if audio_ms > 0:
            self.received_ms += audio_ms

    @property
    def frames_received(self) -> int:
        return round(self.received_ms / self.frame_ms)

    @property
    def balanced(self) -> bool:
        """Every frame sent has come back (or more did)."""
        return self.frames_received >= self.frames_sent

    @property
    def deficit(self) -> int:
        """Frames sent that no packet answered (0 when none)."""
        return max(0, self.frames_sent - self.frames_received)

    @property
    def inserted(self) -> int:
        """Packets beyond the frames sent: frames the server added of its own (net of any
        deficit: a session that lost one frame and gained one shows neither)."""
        return max(0, self.frames_received - self.frames_sent)

    @property
    def coverage(self) -> float | None:
        """Frames received / frames sent; None before any frame was sent."""
        return self.frames_received / self.frames_sent if self.frames_sent else None

    def to_json(self) -> dict[str, Any]:
        """The ``frames`` block of a session's line (sessions.jsonl, replay's report)."""
        coverage = self.coverage
        return {
            "frame_ms": self.frame_ms,
            "frames_sent": self.frames_sent,
            "frames_received": self.frames_received,
            "frame_deficit": self.deficit,
            "frames_inserted": self.inserted,
            "coverage": None if coverage is None else round(coverage, 6),
            "commits_padded": self.commits_padded,
        }
