"""The compiled core (duplexctl/native.py): used only when built from exactly these sources,
and duplexctl behaves the same with it and without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

import pytest

from duplexctl import native

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "recordings" / "hello.wav"
SUFFIX = EXTENSION_SUFFIXES[0]


def fake_build(tmp_path: Path) -> tuple[Path, Path]:
    """A package of two sources and a native dir built from them (empty extension files)."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("A = 1\n")
    (package / "sub" / "b.py").write_text("B = 2\n")
    built = tmp_path / "native"
    (built / "pkg").mkdir(parents=True)
    (built / "pkg" / f"a{SUFFIX}").write_bytes(b"")
    manifest = {
        "source_sha256": native.source_hash(package),
        "suffix": SUFFIX,
        "modules": {"pkg.a": f"pkg/a{SUFFIX}"},
    }
    (built / native.MANIFEST).write_text(json.dumps(manifest))
    return package, built


def test_a_build_from_these_sources_is_fresh(tmp_path: Path) -> None:
    package, built = fake_build(tmp_path)
    assert native.fresh_modules(built, package) == {"pkg.a": built / "pkg" / f"a{SUFFIX}"}


def test_any_changed_source_makes_the_build_stale_not_only_a_compiled_one(tmp_path: Path) -> None:
    package, built = fake_build(tmp_path)
    (package / "sub" / "b.py").write_text("B = 3\n")  # b is not compiled; a may depend on it
    assert native.fresh_modules(built, package) is None


def test_a_new_source_file_makes_the_build_stale(tmp_path: Path) -> None:
    package, built = fake_build(tmp_path)
    (package / "c.py").write_text("")
    assert native.fresh_modules(built, package) is None


@pytest.mark.parametrize("damage", ["no manifest", "bad json", "other python", "file missing"])
def test_a_damaged_or_foreign_build_is_not_used(tmp_path: Path, damage: str) -> None:
    package, built = fake_build(tmp_path)
    manifest_path = built / native.MANIFEST
    if damage == "no manifest":
        manifest_path.unlink()
    elif damage == "bad json":
        manifest_path.write_text("{")
    elif damage == "other python":
        manifest = json.loads(manifest_path.read_text())
        manifest["suffix"] = ".cpython-39-x86_64-linux-gnu.so"
        manifest_path.write_text(json.dumps(manifest))
    else:
        (built / "pkg" / f"a{SUFFIX}").unlink()
    assert native.fresh_modules(built, package) is None


def env(pure: bool) -> dict[str, str]:
    """This environment, with the compiled core switched off (``pure``) or left to decide."""
    return {**os.environ, native.PURE_ENV: "1" if pure else ""}


def where_modules_load(pure: bool) -> dict[str, Any]:
    """In a fresh interpreter: whether the core is compiled, and where each module came from."""
    code = (
        "import json, importlib, duplexctl.native as n\n"
        "files = {m: importlib.import_module(m).__file__ for m in n.COMPILED_MODULES}\n"
        "print(json.dumps({'active': n.active(), 'files': files}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env(pure), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_pure_python_switch_runs_every_module_from_source() -> None:
    loaded = where_modules_load(pure=True)
    assert loaded["active"] is False
    assert all(f.endswith(".py") for f in loaded["files"].values()), loaded


@pytest.mark.skipif(
    native.fresh_modules(native.NATIVE_DIR) is None,
    reason="compiled core not built from these sources (tools/build_native.py)",
)
def test_a_fresh_build_replaces_every_listed_module() -> None:
    loaded = where_modules_load(pure=False)
    assert loaded["active"] is True
    assert all(f.endswith(SUFFIX) for f in loaded["files"].values()), loaded


def replay_report(pure: bool) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "duplexctl", "replay", str(HELLO), "--json"],
        env=env(pure),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_replay_gives_the_same_turn_from_source_and_compiled() -> None:
    """The embedded server's simulated model is deterministic: the same WAV gets the same
    answer, so what the turn reports (not its timings) must match either way."""
    reports = [replay_report(pure) for pure in (True, False)]
    turns = [r["turns"][0] for r in reports]
    for key in ("outcome", "status", "reason"):
        assert turns[0][key] == turns[1][key], (key, turns)
    audio = [t["figures"]["audio_ms"]["value"] for t in turns]
    heard = [t["figures"]["heard_ms"]["value"] for t in turns]
    assert audio[0] == audio[1] > 0 and heard[0] == heard[1], (audio, heard)
    assert turns[0]["outcome"] == "spoke"
    assert [r["violations"] for r in reports] == [[], []]
