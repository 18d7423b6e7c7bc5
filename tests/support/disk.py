"""A small disk of its own, to fill mid-run (issue 31.2): a tmpfs mounted on a temporary
directory (``mount -t tmpfs -o size=…``; the suite runs as root in CI), unmounted after.
Not root (or no mount in this container): the test is skipped, saying so."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(size: str = "4m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on a fresh directory, for as long as the block runs."""
    if os.geteuid() != 0:
        pytest.skip("filling a disk needs a tmpfs of its own: mount needs root (CI runs as root)")
    with tempfile.TemporaryDirectory(prefix="duplexctl-disk-") as where:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", where],
            capture_output=True,
            text=True,
        )
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
        try:
            yield Path(where)
        finally:
            subprocess.run(["umount", "-l", where], check=False)


def fill(disk: Path) -> int:
    """Write a file until the disk is full; the bytes it took."""
    written = 0
    block = b"\0" * 4096
    with (disk / "filler").open("ab", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            written += fh.write(block)
    return written


def assert_readable(run_dir: Path) -> list[str]:
    """Everything in ``run_dir`` is readable as what it says it is: every JSONL line is whole
    JSON (the file ends with a newline), every JSON document parses, every WAV opens; the
    names checked."""
    import soundfile as sf

    checked = []
    for path in sorted(run_dir.rglob("*")):
        if not path.is_file() or path.name.startswith("."):
            continue
        if path.suffix == ".jsonl":
            data = path.read_bytes()
            assert not data or data.endswith(b"\n"), f"{path.name}: a cut line at the end"
            for line in data.splitlines():
                json.loads(line)
        elif path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".wav":
            sf.info(str(path))
        else:
            continue
        checked.append(path.name)
    assert not [p.name for p in run_dir.glob(".*.tmp")], "a temporary file was left behind"
    return checked
