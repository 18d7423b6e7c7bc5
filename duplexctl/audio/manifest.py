"""The bundled recordings' manifest: where speech starts and ends in each file.

Why a manifest: ``t_eos`` (docs/metrics.md) is the send time of the append carrying the end of
the user's speech, so duplexctl must know where speech ends in the WAV *before* the run.
For the bundled turns that position is measured once, by the same energy VAD used
elsewhere, and stored next to the files in ``duplexctl/recordings/manifest.json`` (written by
``tools/make_recordings.py``). Any other file is measured on the fly
(:func:`duplexctl.audio.source.speech_bounds`).

Why inside the package: ``load`` and ``probe`` fall back on these files when given no
inputs, so they are package data and travel with every install, editable or not. A
checkout keeps ``recordings`` at its root as a symlink to this folder, so the paths in the
README and the tests (``recordings/hello.wav``) work there too.

An entry is only trusted for the exact bytes it was measured on: a lookup by path checks the
file's SHA-256, so an edited copy falls back to the VAD instead of reporting stale bounds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duplexctl.errors import BadInput

#: ``duplexctl/recordings/`` (package data); ``DUPLEXCTL_RECORDINGS`` points elsewhere.
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "recordings"
MANIFEST_NAME = "manifest.json"


def recordings_dir() -> Path:
    """The directory holding the bundled recordings (env ``DUPLEXCTL_RECORDINGS`` wins)."""
    override = os.environ.get("DUPLEXCTL_RECORDINGS")
    return Path(override) if override else DEFAULT_DIR


@dataclass(frozen=True, slots=True)
class Recording:
    """One manifest entry. Times are ms from the start of the file."""

    name: str
    path: Path
    text: str
    rate: int
    duration_ms: float
    speech_start_ms: float
    speech_end_ms: float
    sha256: str | None = None


@dataclass(frozen=True, slots=True)
class Manifest:
    """All entries of one ``manifest.json``, keyed by file name (``hello.wav``)."""

    directory: Path
    entries: dict[str, Recording]

    @classmethod
    def load(cls, path: str | Path) -> Manifest:
        """Parse a manifest file; a malformed one is :class:`BadInput` naming the file."""
        path = Path(path)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            files: dict[str, Any] = doc["files"]
            entries = {
                name: Recording(
                    name=name,
                    path=path.parent / name,
                    text=str(entry.get("text", "")),
                    rate=int(entry["rate"]),
                    duration_ms=float(entry["duration_ms"]),
                    speech_start_ms=float(entry["speech_start_ms"]),
                    speech_end_ms=float(entry["speech_end_ms"]),
                    sha256=entry.get("sha256"),
                )
                for name, entry in files.items()
            }
        except OSError as exc:
            raise BadInput(f"{path}: cannot read manifest ({exc.strerror or exc})") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadInput(f"{path}: malformed recordings manifest ({exc!r})") from None
        return cls(directory=path.parent, entries=entries)

    def names(self) -> list[str]:
        return sorted(self.entries)

    def get(self, name: str) -> Recording | None:
        """By name, with or without ``.wav`` (``"hello"`` or ``"hello.wav"``)."""
        return self.entries.get(name) or self.entries.get(f"{name}.wav")

    def for_file(self, path: str | Path) -> Recording | None:
        """The entry for this very file: same resolved path and (when recorded) same bytes."""
        try:
            resolved = Path(path).resolve()
        except OSError:
            return None
        if resolved.parent != self.directory.resolve():
            return None
        entry = self.entries.get(resolved.name)
        if entry is None:
            return None
        if entry.sha256 is not None:
            try:
                digest = hashlib.sha256(resolved.read_bytes()).hexdigest()
            except OSError:
                return None
            if digest != entry.sha256:
                return None
        return entry


@functools.cache
def _load_cached(path: Path) -> Manifest | None:
    return Manifest.load(path) if path.exists() else None


def bundled() -> Manifest | None:
    """The bundled manifest (loaded once), or None when the recordings are missing."""
    return _load_cached(recordings_dir() / MANIFEST_NAME)


def lookup(path: str | Path) -> Recording | None:
    """The bundled manifest's entry for a file path, if it is one of the bundled recordings."""
    manifest = bundled()
    return manifest.for_file(path) if manifest is not None else None


def recording_path(name: str) -> Path:
    """Path of a bundled recording by name (``"hello"`` / ``"hello.wav"``); BadInput if none."""
    manifest = bundled()
    entry = manifest.get(name) if manifest is not None else None
    if entry is None:
        known = ", ".join(manifest.names()) if manifest is not None else "none installed"
        raise BadInput(f"{name}: no such bundled recording (known: {known})")
    return entry.path
