#!/usr/bin/env python3
"""Regenerate the bundled speech turns and ``manifest.json`` from text, deterministically.

Why synthetic speech: replay, load and the test suite need real speech (so the energy VAD,
server VAD and barge-in see what they would see with a person) that anyone can rebuild
byte for byte without a microphone. espeak-ng and sox (with dither off) are deterministic:
two runs on one machine give identical files, and the manifest records both tool versions,
so a test can tell "the recipe changed" from "this machine has another espeak-ng".

Each turn is: espeak-ng at its native 22.05 kHz → sox to 16 kHz mono PCM16 (``-G`` guards
against clipping, ``-D`` disables dither) → sox trims espeak's own leading/trailing silence
and pads exactly 0.3 s before and 1.0 s after the speech. The speech bounds in the manifest
come from duplexctl's own energy VAD (``duplexctl.audio.vad.speech_segments``), so
``t_eos`` (docs/metrics.md) for a bundled file is the same whether it is read from the manifest or
measured on the fly.

The files are package data (``duplexctl/recordings/``, reachable as ``recordings/`` from a
checkout), so this generator lives outside the package, in ``tools/``.

Usage (from the repository root)::

    .venv/bin/python tools/make_recordings.py            # rewrite duplexctl/recordings/
    .venv/bin/python tools/make_recordings.py --out DIR  # write elsewhere (tests)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDINGS = ROOT / "duplexctl" / "recordings"
sys.path.insert(0, str(ROOT))

import soundfile as sf  # noqa: E402

from duplexctl.audio.vad import VadParams, speech_segments  # noqa: E402

RATE = 16000
LEAD_S = 0.3
TRAIL_S = 1.0
VOICE = "en"
WORDS_PER_MINUTE = 175
# sox ``silence`` trimming: audio below this level at either end is espeak's own padding.
TRIM_LEVEL = "-50d"

# name -> text. Keep the list small: the WAVs are committed.
TURNS: dict[str, str] = {
    "hello.wav": "Hello there. What is the weather like in Paris today?",
    "followup.wav": "And what about tomorrow? Will it rain in the afternoon?",
    "interrupt.wav": "Wait, stop. Tell me about Berlin instead.",
    "short_ack.wav": "Okay.",
    "count.wav": "One, two, three, four, five, six, seven, eight, nine, ten.",
}


def _run(cmd: list[str]) -> str:
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return done.stdout + done.stderr


def tool_versions() -> dict[str, str]:
    """First line of each tool's version banner (recorded so tests can compare like with like)."""
    espeak = _run(["espeak-ng", "--version"]).split("Data at")[0].strip()
    sox = _run(["sox", "--version"]).strip().splitlines()[0]
    return {"espeak-ng": espeak, "sox": sox}


def synthesize(text: str, out: Path, workdir: Path) -> None:
    """Text → 16 kHz mono PCM16 WAV with exact lead/trail silence."""
    raw = workdir / "raw.wav"
    rate16 = workdir / "rate16.wav"
    _run(["espeak-ng", "-v", VOICE, "-s", str(WORDS_PER_MINUTE), "-w", str(raw), text])
    _run(["sox", "-G", str(raw), "-D", "-r", str(RATE), "-b", "16", "-c", "1", str(rate16)])
    trim = ["silence", "1", "0.01", TRIM_LEVEL, "reverse"]  # twice: both ends
    _run(["sox", "-D", str(rate16), str(out), *trim, *trim, "pad", str(LEAD_S), str(TRAIL_S)])


def describe(path: Path, text: str) -> dict[str, object]:
    """Manifest entry: rate, duration and speech bounds measured by duplexctl's energy VAD."""
    samples, rate = sf.read(path, dtype="float32")
    segments = speech_segments(samples, rate)
    if not segments:
        raise SystemExit(f"{path.name}: the VAD found no speech")
    return {
        "text": text,
        "rate": rate,
        "channels": 1,
        "duration_ms": round(1000.0 * len(samples) / rate, 3),
        "speech_start_ms": segments[0][0],
        "speech_end_ms": segments[-1][1],
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }


def generate(out_dir: Path) -> dict[str, object]:
    """Write every turn and ``manifest.json`` into ``out_dir``; return the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in TURNS.items():
            target = out_dir / name
            synthesize(text, Path(tmp) / name, Path(tmp))
            shutil.copyfile(Path(tmp) / name, target)
            files[name] = describe(target, text)
    manifest: dict[str, object] = {
        "version": 1,
        "generator": "tools/make_recordings.py",
        "tools": tool_versions(),
        "vad": asdict(VadParams()),
        "files": files,
    }
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    (out_dir / "manifest.json").write_text(text, encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RECORDINGS, help="output directory")
    args = parser.parse_args(argv)
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            print(f"make_recordings: {tool} is not installed (apt-get install {tool})")
            return 2
    manifest = generate(args.out)
    for name, entry in manifest["files"].items():  # type: ignore[union-attr]
        print(
            f"{name}: {entry['duration_ms']:.0f} ms, speech "
            f"{entry['speech_start_ms']:.0f}-{entry['speech_end_ms']:.0f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
