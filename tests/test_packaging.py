"""Installs that stay installable: a wheel works outside the checkout, bounds match the locks.

Why a real wheel in a fresh virtualenv: an editable install reads every file from the
checkout, so it cannot show that a file the commands need (the bundled recordings ``load``
falls back on) is missing from what ``pip install duplexctl`` ships. Why the constraints
checks: ``install.sh`` installs from ``constraints.txt`` and CI smoke-tests
``constraints-oldest.txt``; both are only worth something while they agree with
``pyproject.toml``, which is where the bounds are decided (docs/testing.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.realtime

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "constraints.txt"
OLDEST = ROOT / "constraints-oldest.txt"
BUNDLED = (
    "duplexctl/recordings/manifest.json",
    "duplexctl/recordings/hello.wav",
    "duplexctl/recordings/interrupt.wav",
    "duplexctl/recordings/barge_in.toml",
    "duplexctl/report/html/templates/load.html.j2",
)


def _lock_tool() -> ModuleType:
    """tools/lock.py, the one place the floors are derived from pyproject.toml."""
    spec = importlib.util.spec_from_file_location("duplexctl_lock_tool", ROOT / "tools" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    return [Requirement(r) for r in [*project["dependencies"], *extras]]


def test_oldest_constraints_pin_the_lower_bounds() -> None:
    assert _lock_tool().stale_floors() == {}


@pytest.mark.parametrize("path", [LOCK, OLDEST], ids=lambda p: p.name)
def test_constraints_satisfy_the_bounds(path: Path) -> None:
    pins = _lock_tool().pinned(path)
    for requirement in _requirements():
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{path.name} does not pin {name}"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{path.name}: {name}=={pins[name]} is outside {requirement}"
        )


def test_checkout_paths_reach_the_bundled_recordings() -> None:
    """``recordings/`` at the root is the package's folder, so README paths keep working."""
    assert (ROOT / "recordings").resolve() == (ROOT / "duplexctl" / "recordings").resolve()
    assert (ROOT / "recordings" / "hello.wav").is_file()


def _run(args: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{done.args}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
@pytest.mark.packaging
@pytest.mark.timeout(900)
def test_wheel_installed_outside_the_checkout_runs_replay_and_load(tmp_path: Path) -> None:
    # Build from a copy, so the build leaves nothing in the checkout.
    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
            ".hypothesis", "tests", "bench", "out", "runs",
        ),
    )  # fmt: skip
    wheels = tmp_path / "wheels"
    _ok(_run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, src]))
    (wheel,) = wheels.glob("duplexctl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(BUNDLED) <= names, f"missing from the wheel: {set(BUNDLED) - names}"

    venv = tmp_path / "venv"
    _ok(_run([sys.executable, "-m", "venv", venv]))
    _ok(_run([venv / "bin" / "pip", "install", "-q", "-c", LOCK, wheel]))

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("DUPLEXCTL_RECORDINGS", "PYTHONPATH")}
    where = _ok(
        _run(
            [venv / "bin" / "python", "-c", "from duplexctl.audio.manifest import "
             "recording_path; print(recording_path('hello'))"],
            cwd=elsewhere,
            env=env,
        )
    )  # fmt: skip
    hello = Path(where.stdout.strip())
    assert hello.is_relative_to(venv), f"not the installed copy: {hello}"

    replay = _ok(
        _run([venv / "bin" / "duplexctl", "replay", hello, "--json"], cwd=elsewhere, env=env)
    )
    report = json.loads(replay.stdout)
    assert [t["outcome"] for t in report["turns"]] == ["spoke"]

    # No inputs: load speaks the bundled turns (long enough for one answered turn each).
    load = _ok(
        _run(
            [venv / "bin" / "duplexctl", "load", "--sessions", "2", "--duration", "8s", "--json"],
            cwd=elsewhere,
            env=env,
        )
    )
    result = json.loads(load.stdout)
    assert result["sessions"]["admitted"] == 2
    assert result["turns"]["outcomes"].get("spoke", 0) >= 2
