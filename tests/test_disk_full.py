"""A disk that fills mid-run (issue 31.2): ``replay --out``, ``load --out``, ``probe --out`` and
``talk --record`` write onto a small tmpfs of their own (``support.disk``), which the test
fills once the run has written its first results. Each command stops, closes its sessions
(the server holds none afterwards), says one line naming the file and the cause, and exits 4,
with no traceback; everything it wrote before stays readable (whole JSONL lines, JSON that
parses, WAVs that open, no temporary file left).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.commands import ROOT
from support.disk import assert_readable, fill, small_disk
from support.paths import HELLO, SHORT

from duplexctl.server.app import start_server
from duplexctl.server.config import ServerConfig

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(180)]

SERVER = ServerConfig(port=0, reply_seconds=1.0, chunk_ms=200, ttfa_ms=100.0, max_sessions=8)

LOAD = ["load", SHORT, "--sessions", "2", "--duration", "30s", "--workers", "1", "--plain"]
TALK = ["talk", "--output-device", "none", "--input-file", HELLO, "--input-file", HELLO]
#: command (its run directory last), and the file whose first bytes mean "results are being
#: written": the disk is filled then
COMMANDS = {
    "replay": (
        ["replay", HELLO, HELLO, HELLO, "--turn-detection", "none", "--out"],
        "events.jsonl",
    ),
    "load": ([*LOAD, "--out"], "turns.jsonl"),
    "probe": (["probe", "--only", "handshake", "--only", "responses", "--out"], "report.json"),
    "talk": ([*TALK, "--duration", "20", "--record"], "events.jsonl"),
}


async def _when_written(path: Path, proc: asyncio.subprocess.Process) -> None:
    while (not path.exists() or path.stat().st_size == 0) and proc.returncode is None:
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("command", sorted(COMMANDS))
async def test_a_disk_that_fills_mid_run_stops_the_run_cleanly(command: str) -> None:
    args, first = COMMANDS[command]
    with small_disk("4m") as disk:
        run_dir = disk / "run"
        async with await start_server(SERVER) as server:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "duplexctl", *args, str(run_dir), "--url", server.url,
                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            await asyncio.wait_for(_when_written(run_dir / first, proc), 60)
            assert proc.returncode is None, "the run ended before writing its first results"
            await asyncio.to_thread(fill, disk)
            t_full = time.monotonic()
            out, err = await asyncio.wait_for(proc.communicate(), 90)
            stopped_in = time.monotonic() - t_full
            # its sessions were closed, not dropped: the server holds none of them
            deadline = time.monotonic() + 5
            while server.registry.slots_held and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert server.registry.slots_held == 0
        stderr = err.decode()
        errors = [line for line in stderr.splitlines() if line.startswith("duplexctl: error:")]
        assert proc.returncode == 4, stderr
        assert "Traceback" not in stderr + out.decode() and len(errors) == 1, stderr
        assert f"cannot write {run_dir}/" in errors[0] and "No space left on device" in errors[0]
        assert f"files written to {run_dir}/" in stderr
        assert stopped_in < 30  # it stopped there (the load was asked for 30 s, talk 20 s)
        assert first in assert_readable(run_dir)


async def test_a_removed_directory_stops_replay_with_one_line(tmp_path: Path) -> None:
    """The run directory removed mid-run: the next file it creates cannot be (ENOENT)."""
    run_dir = tmp_path / "run"
    async with await start_server(SERVER) as server:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "duplexctl", "replay", HELLO, HELLO, "--turn-detection",
            "none", "--out", str(run_dir), "--url", server.url,
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        await asyncio.wait_for(_when_written(run_dir / "events.jsonl", proc), 60)
        shutil.rmtree(run_dir)
        _, err = await asyncio.wait_for(proc.communicate(), 90)
    stderr = err.decode()
    assert proc.returncode == 4, stderr
    [line] = [x for x in stderr.splitlines() if x.startswith("duplexctl: error:")]
    assert "No such file or directory (ENOENT)" in line and "Traceback" not in stderr


def test_a_line_that_does_not_fit_is_not_written_at_all() -> None:
    """A short write (the disk filled in the middle of a line) is cut back: whole lines only,
    and the failure is the run's, once."""
    from duplexctl.rundir import JsonLines, Writes, write_atomic

    stops: list[int] = []
    with small_disk("64k") as disk:
        writes = Writes(lambda: stops.append(1))
        lines = JsonLines(disk / "a.jsonl", writes)
        line = b'{"x": "' + b"y" * 3000 + b'"}\n'
        while lines.write(line):
            pass
        assert lines.write(line) is False and stops == [1]
        assert writes.failure is not None and writes.failure.exit_code == 4
        assert (disk / "a.jsonl").read_bytes().count(b"\n") == len(
            (disk / "a.jsonl").read_bytes()
        ) // len(line)
        # a document that does not fit leaves the previous one, and no temporary file
        (disk / "a.jsonl").unlink()
        assert write_atomic(disk / "r.json", b"{}", Writes())
        fill(disk)
        assert not write_atomic(disk / "r.json", b"[" + b"1," * 100000 + b"1]", Writes())
        assert (disk / "r.json").read_bytes() == b"{}"
        assert assert_readable(disk) == ["r.json"]


def test_report_out_on_a_full_disk_is_one_line_and_exit_4(tmp_path: Path) -> None:
    """``report RUN --out DIR`` copies the run's JSONL files into DIR: a disk that cannot take
    them ends the command with one line naming the path and the cause and exit 4 (it was a
    Python traceback: the copy was a plain ``open``), and what DIR holds stays whole lines."""
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "duplexctl", *LOAD[:4], "--duration", "6s", "--workers", "1",
         "--plain", "--out", str(run)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # turns.jsonl made big enough that the copy, not report.json, is what no longer fits
    line = (run / "turns.jsonl").read_bytes().splitlines(keepends=True)[0]
    (run / "turns.jsonl").write_bytes(line * (200_000 // len(line) + 1))
    with small_disk("128k") as disk:
        merged = disk / "merged"
        done = subprocess.run(
            [sys.executable, "-m", "duplexctl", "report", str(run), "--out", str(merged)],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        errors = [x for x in done.stderr.splitlines() if x.startswith("duplexctl: error:")]
        assert done.returncode == 4, done.stderr
        assert "Traceback" not in done.stderr and len(errors) == 1, done.stderr
        assert f"cannot write {merged}/turns.jsonl" in errors[0], errors
        assert "No space left on device" in errors[0]
        assert "report.json" in assert_readable(merged)
