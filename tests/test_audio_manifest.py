"""recordings/ and audio/manifest.py: bundled speech, its bounds, and its reproducibility."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from duplexctl.audio import manifest as manifest_mod
from duplexctl.audio.manifest import Manifest, bundled, lookup, recording_path
from duplexctl.audio.vad import speech_segments
from duplexctl.errors import BadInput

ROOT = Path(__file__).resolve().parent.parent
RECORDINGS = ROOT / "recordings"
EXPECTED = {"hello.wav", "followup.wav", "interrupt.wav", "short_ack.wav", "count.wav"}

needs_tools = pytest.mark.skipif(
    shutil.which("espeak-ng") is None or shutil.which("sox") is None,
    reason="espeak-ng and sox are needed to generate recordings",
)


def test_bundled_manifest_lists_every_recording() -> None:
    manifest = bundled()
    assert manifest is not None
    assert set(manifest.names()) == EXPECTED
    for entry in manifest.entries.values():
        assert entry.path.exists()
        assert entry.rate == 16000 and entry.text


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recording_format_and_bounds_match_the_vad(name: str) -> None:
    entry = bundled().get(name)  # type: ignore[union-attr]
    assert entry is not None
    info = sf.info(entry.path)
    assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
    samples, rate = sf.read(entry.path, dtype="float32")
    assert abs(1000 * len(samples) / rate - entry.duration_ms) < 0.1
    segments = speech_segments(samples, rate)
    assert segments
    assert abs(segments[0][0] - entry.speech_start_ms) <= 20
    assert abs(segments[-1][1] - entry.speech_end_ms) <= 20
    # 0.3 s lead silence (the VAD onset falls on a 16 ms frame), ~1 s trailing silence.
    assert 280 <= entry.speech_start_ms <= 320
    assert 900 <= entry.duration_ms - entry.speech_end_ms <= 1200
    assert hashlib.sha256(entry.path.read_bytes()).hexdigest() == entry.sha256


def test_count_is_a_long_utterance() -> None:
    entry = bundled().get("count")  # type: ignore[union-attr]
    assert entry is not None
    assert 4000 <= entry.speech_end_ms - entry.speech_start_ms <= 6500


def test_lookup_by_name_and_path() -> None:
    path = recording_path("short_ack")
    assert path == recording_path("short_ack.wav")
    entry = lookup(path)
    assert entry is not None and entry.name == "short_ack.wav" and entry.text == "Okay."
    assert lookup(ROOT / "README.md") is None
    with pytest.raises(BadInput, match="no such bundled recording"):
        recording_path("nonexistent")


def test_lookup_rejects_a_modified_file(tmp_path: Path) -> None:
    shutil.copytree(RECORDINGS, tmp_path / "rec", ignore=shutil.ignore_patterns("*.py"))
    manifest = Manifest.load(tmp_path / "rec" / "manifest.json")
    target = tmp_path / "rec" / "hello.wav"
    assert manifest.for_file(target) is not None
    samples, rate = sf.read(target, dtype="float32")
    sf.write(target, samples * 0.5, rate, subtype="PCM_16")
    assert manifest.for_file(target) is None


def test_recordings_dir_can_be_overridden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {
                "files": {
                    "x.wav": {
                        "rate": 8000,
                        "duration_ms": 1000,
                        "speech_start_ms": 100,
                        "speech_end_ms": 900,
                        "text": "x",
                    }
                }
            }
        )
    )
    monkeypatch.setenv("DUPLEXCTL_RECORDINGS", str(tmp_path))
    manifest_mod._load_cached.cache_clear()
    try:
        assert recording_path("x") == tmp_path / "x.wav"
    finally:
        monkeypatch.delenv("DUPLEXCTL_RECORDINGS")
        manifest_mod._load_cached.cache_clear()


def test_malformed_manifest_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_text('{"files": {"a.wav": {"rate": 16000}}}')
    with pytest.raises(BadInput, match=r"manifest\.json: malformed"):
        Manifest.load(path)


def generate(out: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "make_recordings.py"), "--out", str(out)],
        check=True,
        capture_output=True,
    )


@needs_tools
def test_generating_twice_gives_identical_files(tmp_path: Path) -> None:
    generate(tmp_path / "a")
    generate(tmp_path / "b")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert set(names) == EXPECTED | {"manifest.json"}
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name

    # With the same tool versions, the committed recordings are exactly what the recipe makes.
    fresh = json.loads((tmp_path / "a" / "manifest.json").read_text())
    committed = json.loads((RECORDINGS / "manifest.json").read_text())
    if fresh["tools"] != committed["tools"]:
        pytest.skip(f"tool versions differ from the committed ones: {fresh['tools']}")
    assert fresh == committed
    for name in EXPECTED:
        assert np.array_equal(sf.read(tmp_path / "a" / name)[0], sf.read(RECORDINGS / name)[0]), (
            name
        )
