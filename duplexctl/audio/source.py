"""Audio files → mono float32 at the session rate, with the conversion stated.

docs/architecture.md promises that any common format, rate and channel count is accepted, converted
to what the session declared, and that the conversion is *stated*: a user who feeds a
44.1 kHz stereo recording should see that it was downmixed and resampled, because both
change what the server hears. Unreadable input must end the command with one line naming
the file and the problem (:class:`BadInput`, exit 2), never a libsndfile traceback.

Decoding is soundfile's (libsndfile: WAV, FLAC, OGG/Vorbis, Opus, MP3 …); resampling is
:mod:`duplexctl.audio.resample` (soxr), so the client and the reference server convert
identically.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from duplexctl.audio import manifest
from duplexctl.audio.resample import resample
from duplexctl.audio.vad import VadParams, speech_segments
from duplexctl.errors import BadInput

# The wire format a float32 clip will be encoded to, per libsndfile subtype that needs no
# requantisation to reach it (used only to decide whether to say "requantized").
_LOSSLESS_TO: dict[str, set[str]] = {
    "pcm16": {"PCM_16", "PCM_U8", "PCM_S8"},
    "pcm_f32le": {"PCM_16", "PCM_U8", "PCM_S8", "FLOAT"},
    "g711_ulaw": {"ULAW"},
    "g711_alaw": {"ALAW"},
}
# Containers whose samples are compressed (decoding them is itself a conversion worth naming).
_LOSSY_SUBTYPES = {"VORBIS", "OPUS", "MPEG_LAYER_I", "MPEG_LAYER_II", "MPEG_LAYER_III"}


@dataclass(frozen=True, slots=True)
class AudioClip:
    """A whole audio file, decoded to mono float32 at ``rate``.

    ``original_*`` describe the file as found; ``conversion`` is the one-line statement to
    print (None when the file already was what the session wants).
    """

    samples: np.ndarray
    rate: int
    path: Path
    original_rate: int
    original_channels: int
    original_format: str
    conversion: str | None
    original_frames: int = 0  # samples per channel in the file, at original_rate
    declared_frames: int | None = None  # what a WAV header claims, when more than is there

    @property
    def duration_ms(self) -> float:
        return 1000.0 * self.samples.size / self.rate

    @property
    def name(self) -> str:
        return self.path.name


def _channels_label(n: int) -> str:
    return {1: "mono", 2: "stereo"}.get(n, f"{n}-channel")


def _format_label(container: str, subtype: str) -> str:
    """``PCM_24`` for WAV (the common case), ``FLAC PCM_16`` / ``OGG VORBIS`` otherwise."""
    if container == "WAV":
        return subtype
    if container == "MP3":
        return "MP3"
    return f"{container} {subtype}"


def _wav_declared_frames(path: Path) -> int | None:
    """Frames a RIFF/WAVE header declares in its ``data`` chunk (None: not a WAV, or a size
    left as a placeholder by a streaming writer, 0 or 0xFFFFFFFF).

    libsndfile silently reads what is there when a file was cut short, so a truncated
    recording would otherwise look like a short one; comparing with the header says which.
    """
    try:
        with path.open("rb") as f:
            head = f.read(12)
            if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
                return None
            block_align = 0
            while chunk := f.read(8):
                if len(chunk) < 8:
                    return None
                cid, size = chunk[:4], struct.unpack("<I", chunk[4:])[0]
                if cid == b"fmt ":
                    fmt = f.read(size)
                    block_align = struct.unpack("<H", fmt[12:14])[0] if len(fmt) >= 14 else 0
                    f.seek(size % 2, 1)  # chunks are word aligned
                elif cid == b"data":
                    if block_align <= 0 or size in (0, 0xFFFFFFFF):
                        return None
                    return size // block_align
                else:
                    f.seek(size + size % 2, 1)
    except OSError:
        return None
    return None


def describe_contents(clip: AudioClip) -> str:
    """What the file holds, for a message: ``file holds 28 samples (1.75 ms) at 16000 Hz``,
    and whether its header promised more (a truncated file)."""

    def ms(frames: int) -> str:
        return f"{round(1000.0 * frames / clip.original_rate, 2):g} ms"

    frames, rate = clip.original_frames, clip.original_rate
    text = f"file holds {frames} samples ({ms(frames)}) at {rate} Hz"
    if clip.declared_frames is not None:
        declared = clip.declared_frames
        text += f", truncated (its header declares {declared} samples, {ms(declared)})"
    return text


def no_speech_message(clip: AudioClip, params: VadParams | None = None) -> str:
    """Why a clip has no speech, saying what it holds: too short to hold any, truncated, or
    audio in which the energy VAD found none."""
    params = params or VadParams()
    found = describe_contents(clip)
    if clip.duration_ms < params.min_speech_ms:
        return (
            f"{found}; too short to hold speech (the energy VAD needs at least "
            f"{params.min_speech_ms} ms), so the turn has no end"
        )
    return (
        f"{found}; no speech found in it (energy VAD, speech above "
        f"{params.threshold_db:g} dBFS), so the turn has no end"
    )


def _fail(path: Path, problem: str) -> BadInput:
    return BadInput(f"{path}: {problem}")


def _one_line(text: object) -> str:
    return " ".join(str(text).split()) or "unknown error"


def load_audio(path: str | Path, rate: int = 16000, *, wire_format: str = "pcm16") -> AudioClip:
    """Decode ``path`` to mono float32 at ``rate``.

    ``wire_format`` is what the session will send (pcm16 by default); it only shapes the
    ``conversion`` statement (a 24-bit file sent as pcm16 is "requantized").
    Multichannel audio is downmixed by averaging the channels. Raises :class:`BadInput`
    (one line, naming the file) for a missing, unreadable or empty file.
    """
    path = Path(path)
    if not path.exists():
        raise _fail(path, "no such file")
    if path.is_dir():
        raise _fail(path, "is a directory, not an audio file")
    try:
        with sf.SoundFile(str(path)) as f:
            file_rate, container, subtype = int(f.samplerate), str(f.format), str(f.subtype)
            data = f.read(dtype="float32", always_2d=True)
    except sf.LibsndfileError as exc:
        raise _fail(path, f"not a readable audio file ({_one_line(exc.error_string)})") from None
    except (RuntimeError, OSError, ValueError, TypeError) as exc:
        raise _fail(path, f"not a readable audio file ({_one_line(exc)})") from None
    frames = int(data.shape[0])
    declared = _wav_declared_frames(path) if container == "WAV" else None
    if declared is not None and declared <= frames:
        declared = None  # as promised (or padded): nothing to say
    if frames == 0:
        cut = f" (its header declares {declared} samples: truncated)" if declared else ""
        raise _fail(path, f"contains no audio (0 samples){cut}")
    channels = int(data.shape[1])
    mono = data[:, 0] if channels == 1 else data.mean(axis=1, dtype=np.float32)
    samples = np.ascontiguousarray(resample(mono, file_rate, rate), dtype=np.float32)

    changes: list[str] = []
    if channels != 1:
        changes.append("downmixed")
    if file_rate != rate:
        changes.append("resampled")
    if subtype in _LOSSY_SUBTYPES:
        changes.append("decoded")
    elif subtype not in _LOSSLESS_TO.get(wire_format, set()):
        changes.append("requantized")
    fmt = _format_label(container, subtype)
    conversion = None
    if changes:
        conversion = (
            f"{path.name}: {file_rate} Hz {_channels_label(channels)} {fmt} → "
            f"{rate} Hz mono {wire_format} ({', '.join(changes)})"
        )
    return AudioClip(
        samples=samples,
        rate=rate,
        path=path,
        original_rate=file_rate,
        original_channels=channels,
        original_format=fmt,
        conversion=conversion,
        original_frames=frames,
        declared_frames=declared,
    )


def speech_bounds(clip: AudioClip, params: VadParams | None = None) -> tuple[float, float] | None:
    """(start_ms, end_ms) of the speech in ``clip``: first onset to last end, in file ms.

    From the recordings manifest when ``clip`` is an unmodified bundled recording (so the
    bounds are the published ones), else measured with the energy VAD. None when there is
    no speech at all — the caller reports that as bad input, since ``t_eos`` is undefined.
    """
    entry = manifest.lookup(clip.path)
    if entry is not None and params is None:
        return (entry.speech_start_ms, entry.speech_end_ms)
    segments = speech_segments(clip.samples, clip.rate, params)
    if not segments:
        return None
    return (segments[0][0], segments[-1][1])
