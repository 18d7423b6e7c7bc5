"""``--out DIR``: the run's artefacts, written as the run goes so Ctrl-C loses nothing.

* ``events.jsonl`` — the wire trace, both directions, one JSON object per line with the
  send/recv time (ms since the run's origin, and raw monotonic ns); audio payloads are
  replaced by their decoded byte length and ``data:`` URIs (``ref_audio``) by theirs, so the
  trace stays small and never repeats what the WAVs hold. Each line is handed to the kernel
  as soon as it is written (unbuffered), so a killed run keeps every line up to the kill.
* ``response_NN_<status>.wav`` — everything received for response NN (1-based, in creation
  order), written while it arrives as ``response_NN_in_progress.wav`` and renamed when
  ``response.done`` says how it ended (``interrupted`` when the run stops first).
* ``conversation.wav`` — two channels on one wall-clock timeline from the run's origin: the
  user on the left at the time each append was sent, the assistant on the right at the time
  the playback clock played it (flushed audio never appears).
* ``report.json`` — replaced atomically (write + rename) every time it is updated, so it is
  always a complete, parseable document.

A write that fails (the disk full, …) is reported to the run's
:class:`~duplexctl.rundir.Writes` (which stops the run) and every later write is skipped:
the files keep what they held, events.jsonl whole lines (duplexctl/rundir.py).

The API key is never passed in, so it cannot be written.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np

from duplexctl.audio import pcm
from duplexctl.audio.resample import StreamResampler, resample
from duplexctl.audio.writers import ConversationWavWriter, WavWriter
from duplexctl.protocol import codec
from duplexctl.rundir import JsonLines, Writes, write_atomic
from duplexctl.units import NS_PER_MS

_AUDIO_KEYS: Final = frozenset({"audio", "delta"})
_DATA_URI_MIN: Final = 64  # shorter data: strings are left alone
# user audio closer than this to where the previous chunk ended is written contiguously:
# send jitter of a few ms must not punch clicks into the recording
_SNAP_MS: Final = 20.0


def _b64_len(text: str) -> int:
    try:
        return len(pcm.b64decode(text))
    except pcm.AudioDecodeError:
        return (len(text) * 3) // 4


def redact(obj: Any, *, audio_keys: bool) -> Any:
    """A copy of a wire event with audio payloads and data: URIs replaced by byte lengths.

    ``audio_keys``: whether ``audio``/``delta`` string fields hold base64 audio in this
    event (true for appends and audio deltas; a transcript delta's ``delta`` is text).
    """
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if audio_keys and key in _AUDIO_KEYS and isinstance(value, str):
                out[key] = _b64_len(value)
            else:
                out[key] = redact(value, audio_keys=audio_keys or key == "metadata")
        return out
    if isinstance(obj, list):
        return [redact(v, audio_keys=audio_keys) for v in obj]
    if isinstance(obj, str) and obj.startswith("data:") and len(obj) > _DATA_URI_MIN:
        head, _, payload = obj.partition(",")
        return f"{head},<{_b64_len(payload)} bytes>"
    return obj


def _has_audio(event_type: str) -> bool:
    return event_type in (
        "input_audio_buffer.append",
        "response.output_audio.delta",
        "response.audio.delta",
    )


class RunArtifacts:
    """The ``--out`` directory of one replay run (see module docstring)."""

    def __init__(
        self,
        out_dir: Path,
        *,
        origin_ns: int,
        user_rate: int = 16000,
        conversation_rate: int = 24000,
        writes: Writes | None = None,
    ) -> None:
        self.dir = Path(out_dir)
        self.writes = writes if writes is not None else Writes()
        self.origin_ns = origin_ns
        self.user_rate = user_rate
        self.rate = conversation_rate
        with self.writing(self.dir):
            self.dir.mkdir(parents=True, exist_ok=True)
        self._events = JsonLines(self.dir / "events.jsonl", self.writes)
        self.conversation: ConversationWavWriter | None = None
        with self.writing(self.dir / "conversation.wav"):
            self.conversation = ConversationWavWriter(self.dir / "conversation.wav", self.rate)
        self._user_resampler = StreamResampler(user_rate, self.rate)
        self._user_next_ms: float | None = None
        self._responses: dict[str, tuple[int, WavWriter]] = {}
        self.response_files: dict[str, Path] = {}
        self.events_written = 0

    @contextlib.contextmanager
    def writing(self, path: Path) -> Iterator[None]:
        """A write of ``path``: an OSError is the run's write failure (it stops the run)."""
        try:
            yield
        except OSError as exc:
            self.writes.failed(path, exc)

    # -- events.jsonl ------------------------------------------------------------------------

    def event(self, direction: str, t_ns: int, frame: dict[str, Any]) -> None:
        """One wire event: ``direction`` is ``send`` or ``recv``."""
        if not self.writes.ok:
            return
        etype = frame.get("type") if isinstance(frame.get("type"), str) else ""
        line = {
            "t_ms": round((t_ns - self.origin_ns) / NS_PER_MS, 3),
            "t_ns": t_ns,
            "dir": direction,
            "type": etype,
            "seq": frame.get("server_event_seq"),
            "event": redact(frame, audio_keys=_has_audio(str(etype))),
        }
        if self._events.write(codec.dumps_bytes(line) + b"\n"):
            self.events_written += 1

    def note(self, t_ns: int, what: str, **fields: Any) -> None:
        """A client-side happening worth seeing in the trace (drop, reconnect, flush)."""
        if not self.writes.ok:
            return
        line = {
            "t_ms": round((t_ns - self.origin_ns) / NS_PER_MS, 3),
            "t_ns": t_ns,
            "dir": "note",
            "type": what,
            **fields,
        }
        self._events.write(codec.dumps_bytes(line) + b"\n")

    # -- audio -------------------------------------------------------------------------------

    def user_audio(self, samples: np.ndarray, sent_ns: int) -> None:
        """One append's samples (float32 at the user rate), placed at its send time."""
        if not self.writes.ok or self.conversation is None:
            return
        at_ms = (sent_ns - self.origin_ns) / NS_PER_MS
        if self._user_next_ms is not None and abs(at_ms - self._user_next_ms) < _SNAP_MS:
            at_ms = self._user_next_ms
        out = self._user_resampler.process(samples)
        with self.writing(self.conversation.path):
            self.conversation.write_user(out, at_ms)
        self._user_next_ms = at_ms + 1000.0 * samples.size / self.user_rate

    def response_audio(self, response_id: str, pcm16: bytes, rate: int) -> None:
        """Received audio of one response (PCM16 mono at ``rate``), appended to its WAV."""
        if not self.writes.ok:
            return
        entry = self._responses.get(response_id)
        if entry is None:
            index = len(self._responses) + 1
            path = self.dir / f"response_{index:02d}_in_progress.wav"
            with self.writing(path):
                entry = (index, WavWriter(path, rate))
                self._responses[response_id] = entry
                self.response_files[response_id] = path
            if entry is None:
                return
        writer = entry[1]
        samples = np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / 32768.0
        if rate != writer.rate:
            samples = resample(samples, rate, writer.rate)
        with self.writing(writer.path):
            writer.write(samples)

    def response_started(self, response_id: str, rate: int) -> None:
        """Create the response's WAV before its first audio (so a silent answer has one)."""
        if response_id not in self._responses:
            self.response_audio(response_id, b"", rate)

    def assistant_heard(self, samples: np.ndarray, rate: int, at_ns: int) -> None:
        """Assistant audio (float32 at ``rate``) that the playback clock played at ``at_ns``."""
        if not self.writes.ok or self.conversation is None:
            return
        if rate != self.rate:
            samples = resample(samples, rate, self.rate)
        with self.writing(self.conversation.path):
            self.conversation.write_assistant(samples, (at_ns - self.origin_ns) / NS_PER_MS)

    def response_finished(self, response_id: str, status: str) -> Path | None:
        """Rename the response's WAV after how it ended; returns the final path."""
        entry = self._responses.get(response_id)
        if entry is None:
            return None
        index, writer = entry
        final = self.dir / f"response_{index:02d}_{_safe(status)}.wav"
        current = self.response_files[response_id]
        if current != final and self.writes.ok:
            with self.writing(final):
                os.replace(current, final)
                writer.path = final
                self.response_files[response_id] = final
        return self.response_files[response_id]

    # -- report.json -------------------------------------------------------------------------

    def write_report(self, report: dict[str, Any]) -> Path:
        """Replace report.json atomically (always a complete document on disk)."""
        return write_report(self.dir, report, self.writes)

    # -- end ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Finish every file; responses still open are named ``interrupted``. Idempotent."""
        for rid, path in list(self.response_files.items()):
            if path.name.endswith("_in_progress.wav"):
                self.response_finished(rid, "interrupted")
        for _, writer in self._responses.values():
            writer.close()
        if self.conversation is not None:
            self.conversation.close()
        self._events.close()


def _safe(status: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in status) or "unknown"


def write_report(directory: Path, report: dict[str, Any], writes: Writes | None = None) -> Path:
    """Replace ``directory/report.json`` atomically (always a complete document on disk)."""
    path = directory / "report.json"
    write_atomic(path, json.dumps(report, indent=2, default=str) + "\n", writes)
    return path
