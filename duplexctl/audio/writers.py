"""WAV writers that lose nothing on Ctrl-C (or even a kill).

docs/architecture.md: "recordings and results are written incrementally and survive Ctrl-C". A
libsndfile writer buffers and fixes the RIFF sizes only on close, so an interrupted run
leaves a file that players call empty or corrupt. These writers instead hand every block
to the kernel at once (``os.pwrite``, no user-space buffer) and rewrite the two RIFF size
fields after each write, so at any instant — Ctrl-C, SIGKILL, a crash — the file on disk is
a valid 16-bit PCM WAV holding all audio written so far. The cost is two 4-byte writes per
block, negligible next to a websocket frame.

:class:`ConversationWavWriter` places audio on a timeline instead of appending it: the user
on the left channel at the time it was sent, the assistant on the right at the time it
would have been heard (playback clock), with zeros in the gaps — so listening to the file
reproduces the conversation's overlaps, barge-ins included.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from types import TracebackType
from typing import Self

import numpy as np
import soundfile as sf

_HEADER_BYTES = 44
_SAMPLE_BYTES = 2


def _to_int16(samples: np.ndarray) -> np.ndarray:
    """float32 in [-1, 1] → int16 with the same scaling and clipping as ``pcm.float_to_pcm16``."""
    data = np.asarray(samples, dtype=np.float32)
    return np.round(np.clip(data, -1.0, 32767.0 / 32768.0) * 32768.0).astype("<i2")


def _header(rate: int, channels: int, data_bytes: int) -> bytes:
    block = channels * _SAMPLE_BYTES
    return b"".join(
        [
            b"RIFF",
            struct.pack("<I", 36 + data_bytes),
            b"WAVEfmt ",
            struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * block, block, 16),
            b"data",
            struct.pack("<I", data_bytes),
        ]
    )


class _PcmWavFile:
    """A 16-bit PCM WAV on a raw file descriptor; the header is kept valid after each write."""

    def __init__(self, path: str | Path, rate: int, channels: int) -> None:
        self.path = Path(path)
        self.rate = rate
        self.channels = channels
        self.frames = 0
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.pwrite(self._fd, _header(rate, channels, 0), 0)

    @property
    def closed(self) -> bool:
        return self._fd is None

    @property
    def duration_ms(self) -> float:
        return 1000.0 * self.frames / self.rate

    def _require_open(self) -> int:
        if self._fd is None:
            raise ValueError(f"{self.path}: writer is closed")
        return self._fd

    def _offset(self, frame: int) -> int:
        return _HEADER_BYTES + frame * self.channels * _SAMPLE_BYTES

    def _write_frames(self, frame: int, data: np.ndarray) -> None:
        """Write interleaved int16 ``data`` (frames × channels) at ``frame``; zero-fills any
        gap after the current end, then publishes the new length in the header."""
        fd = self._require_open()
        if frame > self.frames:
            gap = np.zeros((frame - self.frames) * self.channels, dtype="<i2")
            os.pwrite(fd, gap.tobytes(), self._offset(self.frames))
        os.pwrite(fd, np.ascontiguousarray(data, dtype="<i2").tobytes(), self._offset(frame))
        end = max(self.frames, frame + data.shape[0])
        if end != self.frames:
            self.frames = end
            data_bytes = end * self.channels * _SAMPLE_BYTES
            os.pwrite(fd, struct.pack("<I", 36 + data_bytes), 4)
            os.pwrite(fd, struct.pack("<I", data_bytes), 40)

    def _read_frames(self, frame: int, count: int) -> np.ndarray:
        """Frames ``[frame, frame + count)`` already on disk (zeros past the end)."""
        fd = self._require_open()
        out = np.zeros((count, self.channels), dtype="<i2")
        have = max(0, min(count, self.frames - frame))
        if have:
            raw = os.pread(fd, have * self.channels * _SAMPLE_BYTES, self._offset(frame))
            out[:have] = np.frombuffer(raw, dtype="<i2").reshape(have, self.channels)
        return out

    def flush(self) -> None:
        """Force the data to the disk itself (the kernel already has it after each write)."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        """Idempotent; safe to call from ``finally`` and again from ``__exit__``."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            self.close()


class WavWriter(_PcmWavFile):
    """Mono 16-bit WAV, appended to as audio arrives (e.g. one response's output)."""

    def __init__(self, path: str | Path, rate: int) -> None:
        super().__init__(path, rate, channels=1)

    def write(self, samples: np.ndarray) -> None:
        """Append mono float32 samples in [-1, 1]."""
        data = _to_int16(samples).reshape(-1, 1)
        if data.size:
            self._write_frames(self.frames, data)


class ConversationWavWriter(_PcmWavFile):
    """Two-channel 16-bit WAV: user on the left (channel 0), assistant on the right (1).

    Each block is placed at a timeline position in ms chosen by the caller (user: the
    user-timeline ``u`` at which it was sent; assistant: when the playback clock would have
    played it, on the same origin). Gaps are zeros. Overlapping writes on one channel **add**
    (mixed, then clipped to 16 bits): two responses heard at once sound like both, as they
    would from a speaker. Samples before position 0 are dropped. Samples must already be at
    the writer's ``rate`` (resample first: :mod:`duplexctl.audio.resample`).
    """

    USER = 0
    ASSISTANT = 1

    def __init__(self, path: str | Path, rate: int) -> None:
        super().__init__(path, rate, channels=2)

    def write_user(self, samples: np.ndarray, at_ms: float) -> None:
        self.write(self.USER, samples, at_ms)

    def write_assistant(self, samples: np.ndarray, at_ms: float) -> None:
        self.write(self.ASSISTANT, samples, at_ms)

    def write(self, channel: int, samples: np.ndarray, at_ms: float) -> None:
        """Mix mono float32 ``samples`` into ``channel`` starting at ``at_ms``."""
        if channel not in (self.USER, self.ASSISTANT):
            raise ValueError(f"channel must be 0 (user) or 1 (assistant), not {channel}")
        data = np.asarray(samples, dtype=np.float32).reshape(-1)
        start = round(at_ms * self.rate / 1000.0)
        if start < 0:
            data = data[-start:]
            start = 0
        if data.size == 0:
            return
        frames = self._read_frames(start, data.size)
        mixed = frames[:, channel].astype(np.int32) + _to_int16(data).astype(np.int32)
        frames[:, channel] = np.clip(mixed, -32768, 32767)
        self._write_frames(start, frames)


def write_wav(path: str | Path, samples: np.ndarray, rate: int) -> None:
    """One-shot 16-bit WAV of float32 samples: 1-D mono, or 2-D (frames, channels)."""
    sf.write(str(path), _to_int16(samples), rate, subtype="PCM_16")
