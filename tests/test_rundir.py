"""One rule for every directory a run writes (issue 17.3): ``duplexctl.rundir``.

The rule itself (fresh, empty, non-empty, a file, ``--overwrite`` of ours and of someone
else's directory), then each command that writes a directory — ``load --out``,
``replay --out``, ``talk --record``, ``report --out`` / ``--plot`` — run as a user runs it:
a non-empty directory or a file is one line and exit 2 before anything is written, and a
run ends by saying where its files went.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.commands import HELLO, SHORT, saved_load_run
from typer.testing import CliRunner

from duplexctl.cli import app
from duplexctl.errors import BadInput
from duplexctl.rundir import MARKER, prepare_run_dir

pytestmark = pytest.mark.realtime


def prepare(path: Path, overwrite: bool = False) -> Path:
    return prepare_run_dir(path, flag="--out", overwrite=overwrite, command="test")


# -- the rule ------------------------------------------------------------------------------------


def test_fresh_and_empty_directories_are_used(tmp_path: Path) -> None:
    fresh = prepare(tmp_path / "a" / "b")
    assert fresh.is_dir() and (fresh / MARKER).is_file()
    (tmp_path / "empty").mkdir()
    assert json.loads((prepare(tmp_path / "empty") / MARKER).read_text())["command"] == "test"


def test_non_empty_directory_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "turns.jsonl").write_text("old\n")
    with pytest.raises(BadInput, match=r"--out .*run: directory is not empty .*--overwrite"):
        prepare(tmp_path / "run")
    assert (tmp_path / "run" / "turns.jsonl").read_text() == "old\n"


def test_a_file_is_refused_even_with_overwrite(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    for overwrite in (False, True):
        with pytest.raises(BadInput, match="exists and is not a directory"):
            prepare(tmp_path / "f", overwrite)
    assert (tmp_path / "f").read_text() == "x"


def test_overwrite_empties_a_directory_duplexctl_wrote(tmp_path: Path) -> None:
    run = prepare(tmp_path / "run")
    (run / "turns.jsonl").write_text("old\n")
    (run / "response_07_completed.wav").write_bytes(b"RIFF")
    (run / "plots").mkdir()
    (run / "plots" / "a.png").write_bytes(b"png")
    prepare(run, overwrite=True)
    assert sorted(p.name for p in run.iterdir()) == [MARKER]


def test_overwrite_never_deletes_a_directory_duplexctl_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "thesis.tex").write_text("years of work")
    with pytest.raises(BadInput, match="not written by duplexctl: not deleting it"):
        prepare(tmp_path / "home", overwrite=True)
    assert (tmp_path / "home" / "thesis.tex").read_text() == "years of work"


# -- every command ------------------------------------------------------------------------------


def occupied(tmp_path: Path) -> Path:
    """A non-empty directory that is not a run (someone's files)."""
    d = tmp_path / "busy"
    d.mkdir()
    (d / "keep.txt").write_text("mine")
    return d


def a_file(tmp_path: Path) -> Path:
    f = tmp_path / "file.txt"
    f.write_text("mine")
    return f


COMMANDS = {
    "load": ["load", SHORT, "--sessions", "1", "--duration", "3s", "--workers", "1", "--out"],
    "replay": ["replay", HELLO, "--out"],
    "talk": ["talk", "--output-device", "none", "--duration", "1", "--record"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("where", [occupied, a_file], ids=["non-empty dir", "file"])
def test_every_command_refuses_in_one_line(command: str, where: object, tmp_path: Path) -> None:
    target = where(tmp_path)  # type: ignore[operator]
    res = CliRunner().invoke(app, [*COMMANDS[command], str(target)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("duplexctl: error: "), res.stderr
    assert str(target) in lines[0]
    assert (target / "keep.txt" if target.is_dir() else target).read_text() == "mine"


def test_load_twice_into_one_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = [*COMMANDS["load"], str(run), "--json", "--server-option", "reply_seconds=1"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert first.stderr.splitlines()[-1] == f"duplexctl: files written to {run}/"
    (run / "stale.wav").write_bytes(b"RIFF")
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "--overwrite" in again.stderr
    replaced = CliRunner().invoke(app, [*args, "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    report = json.loads(replaced.stdout)
    sessions = (run / "sessions.jsonl").read_text().splitlines()
    assert len(sessions) == report["admission"]["attempts"]  # this run's only, not appended
    assert not (run / "stale.wav").exists()


def test_replay_says_where_its_files_went(tmp_path: Path) -> None:
    run = tmp_path / "replay"
    res = CliRunner().invoke(app, ["replay", HELLO, "--out", str(run), "--json"])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[-1] == f"duplexctl: files written to {run}/"
    assert (run / "events.jsonl").exists() and (run / MARKER).exists()


def test_report_out_and_plot_follow_the_rule(tmp_path: Path) -> None:
    saved = saved_load_run(tmp_path / "run1")
    busy = occupied(tmp_path)
    for flag in ("--out", "--plot"):
        res = CliRunner().invoke(app, ["report", str(saved), flag, str(busy)])
        assert res.exit_code == 2 and "directory is not empty" in res.stderr, res.output
    res = CliRunner().invoke(app, ["report", str(saved), "--out", str(saved), "--overwrite"])
    assert res.exit_code == 2 and "is one of the inputs" in res.stderr
    assert (saved / "report.json").exists()  # the input was not touched
    merged = tmp_path / "merged"
    res = CliRunner().invoke(app, ["report", str(saved), "--out", str(merged)])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[-1] == f"duplexctl: files written to {merged}/"
    assert (merged / "report.json").exists()
