"""The command line teaches itself (issue 35): help pages, examples, the reference, and the
first mistakes a newcomer makes.

* ``COLUMNS=80 duplexctl CMD --help`` cuts nothing (no ``…``, no line over 80), shows its
  panels, one default notation and 3-5 examples; flags carry no ``<bool>``.
* Every example in a help page parses (its options exist, its values pass their parsers).
* An option name means one thing: the same value kind in every command that has it.
* docs/cli.md's generated part is what tools/cli_reference.py writes now.
* Each newcomer mistake of the issue is one line naming the option, the value and what is
  valid, with the right exit code; ``--json`` prints one document also when the run could
  not start.
"""

from __future__ import annotations

import json
import shlex
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from support.cli import invoke, one_line
from support.paths import HELLO, ROOT
from typer.main import get_command
from typer.testing import CliRunner

from duplexctl.cli import app
from duplexctl.cli.app import START
from duplexctl.cli.help import EXTRAS, describe

GROUP = get_command(app)
COMMANDS = list(GROUP.list_commands(None))  # type: ignore[attr-defined]


def _command(name: str):  # type: ignore[no-untyped-def]
    return GROUP.get_command(None, name)  # type: ignore[attr-defined]


def help_page(*args: str, columns: int = 80) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("name", COMMANDS)
def test_help_at_80_columns_cuts_nothing_and_shows_panels_and_examples(name: str) -> None:
    page = help_page(name)
    lines = page.splitlines()
    assert "…" not in page
    assert max(len(line) for line in lines) <= 80
    extras = EXTRAS[name]
    for panel in extras.panels:
        assert f"─ {panel} ─" in page, panel
    assert "─ Examples ─" in page and 3 <= len(extras.examples) <= 5
    for example in extras.examples:
        assert example.says.split()[0] in page
    assert "<bool>" not in page and "(default" not in page.lower()
    assert "--help" in page


def test_help_wraps_at_any_width_and_the_root_help_says_where_to_start() -> None:
    for columns in (60, 120):
        page = help_page("load", columns=columns)
        assert "…" not in page and max(map(len, page.splitlines())) <= columns
        assert "--measure-slot-release" in page and "--server-max-sessions" in page
    root = help_page()
    assert "…" not in root and "load --find-capacity" in root
    first = [line.split()[1] for line in root.splitlines() if line.startswith("│ ")]
    assert [name for name in first if name in COMMANDS] == COMMANDS
    assert COMMANDS[:2] == ["load", "replay"]  # the question most people come with, first


@pytest.fixture
def reader_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory as the examples assume one: the recordings, two saved runs."""
    (tmp_path / "recordings").symlink_to(ROOT / "recordings")
    for run in ("run1", "run2"):
        (tmp_path / run).mkdir()
    monkeypatch.chdir(tmp_path)
    yield tmp_path


@pytest.mark.parametrize(
    "example",
    [(name, e.command) for name in COMMANDS for e in EXTRAS[name].examples]
    + [("", e.command) for e in START],
    ids=lambda e: e[1][:60],
)
def test_every_help_example_parses(example: tuple[str, str], reader_dir: Path) -> None:
    """Each command's examples, and the root help's "Start here"."""
    name, line = example
    argv = shlex.split(line)
    assert argv[0] == name or not name
    name = argv[0]
    if argv[1:] == ["--help"]:
        return
    command = _command(name)
    with command.make_context(name, argv[1:]) as ctx:  # raises on an unknown option or value
        assert ctx.params


def _kinds() -> dict[str, dict[str, str]]:
    """{option: {command: metavar}} for every option, from the help model."""
    found: dict[str, dict[str, str]] = {}
    for name in COMMANDS:
        command = _command(name)
        for _, docs in describe(command, typer.Context(command, info_name=name)).panels:
            for doc in docs:
                for option in doc.names.split(" / ")[0].split(", "):
                    found.setdefault(option, {})[name] = doc.metavar
    return found


def test_an_option_name_means_one_kind_of_value_in_every_command() -> None:
    """``--duration`` took 8s in load but not in talk; ``--out`` was a path in one command and
    a string in another. Choices may differ by command (talk also has turn detection auto)."""
    differing = {
        option: by_command
        for option, by_command in _kinds().items()
        if len(set(by_command.values())) > 1 and not all("|" in m for m in by_command.values())
    }
    assert differing == {}
    kinds = _kinds()
    assert set(kinds["--duration"].values()) == {"DURATION"}
    assert set(kinds["--out"].values()) == {"DIR"}


def test_durations_read_the_same_in_every_command() -> None:
    for name, args in (
        ("talk", ["--duration", "8s"]),
        ("load", ["--duration", "8s"]),
        ("probe", ["--budget-s", "8s"]),
        ("serve", ["--disconnect-grace-s", "8s"]),
    ):
        command = _command(name)
        with command.make_context(name, args) as ctx:
            assert 8.0 in ctx.params.values(), name
    with _command("talk").make_context("talk", ["--duration", "500ms"]) as ctx:
        assert ctx.params["duration"] == 0.5
    with _command("load").make_context("load", ["--rate", "120/m", "--warmup", "2m"]) as ctx:
        assert (ctx.params["rate"], ctx.params["warmup"]) == (2.0, 120.0)


def test_the_cli_reference_is_up_to_date() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import cli_reference
    finally:
        sys.path.pop(0)
    current = cli_reference.CLI_MD.read_text(encoding="utf-8")
    assert current == cli_reference.expected(current), (
        "docs/cli.md is out of date: run .venv/bin/python tools/cli_reference.py"
    )


# --- the newcomer's mistakes: one line each, the right exit code ----------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["load", "--ramp", "0:1,10s:4"], ["--ramp 0:1,10s:4", "--sessions", "--rate"]),
        (
            ["load", "--server-option", "bogus=1", "--sessions", "1", "--count", "1"],
            ["--server-option 'bogus=1'", "unknown key", "reply_seconds", "max_sessions"],
        ),
        (["serve", "--dialect", "g3"], ["--dialect", "'g3'", "g1", "g2"]),
        (["load", str(ROOT / "recordings"), "--count", "1", "--sessions", "1"], ["is a directory"]),
        (["talk", "--duration", "8x"], ["--duration", "'8x'", "8s", "500ms"]),
        (["load", "--sessions", "many", "--count", "1"], ["--sessions", "'many'", "whole number"]),
        (["load", "--sesions", "2"], ["no such option", "--sesions", "load --help"]),
        (["replay", str(ROOT / "recordings" / "nope.wav")], ["nope.wav", "no such file"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0] in COMMANDS else None,
)
def test_a_newcomer_mistake_is_one_line_and_exit_2(args: list[str], says: list[str]) -> None:
    done = invoke(*args)
    assert done.code == 2, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("duplexctl: error: ")
    for words in says:
        assert words in line, line
    assert "__init__" not in line and "Dialect" not in line and "Traceback" not in line


def test_serve_on_a_busy_port_is_one_line_naming_port_0() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = invoke("serve", "--port", str(port))
    assert done.code == 2
    line = one_line(done.stderr)
    assert f"--port {port}" in line and "already in use" in line and "--port 0" in line


@pytest.mark.parametrize("command", ["replay", "probe"])
def test_json_prints_one_document_when_the_server_cannot_be_reached(command: str) -> None:
    url = "ws://127.0.0.1:9/v1/realtime?duplex=1"
    args = [str(HELLO)] if command == "replay" else ["--only", "handshake"]
    done = invoke(command, *args, "--url", url, "--json")
    assert done.code == 3
    document = json.loads(done.stdout)  # exactly one document
    assert document["exit_code"] == 3 and document["error"]["kind"] == "unreachable"
    assert "nothing is listening" in document["error"]["message"]


def test_json_prints_one_document_on_bad_usage_too() -> None:
    done = invoke("load", "--sessions", "1", "--duration", "8x", "--json")
    assert done.code == 2
    assert json.loads(done.stdout)["error"]["kind"] == "bad_usage"
    done = invoke("load", "--ramp", "0:1,10s:4", "--json")
    assert done.code == 2 and "--sessions or --rate" in json.loads(done.stdout)["error"]["message"]


def test_no_command_is_the_root_help_and_no_error_line() -> None:
    done = invoke()
    assert done.code == 2  # as click says it: usage, not success
    assert "Start here" in done.stdout and done.stderr == ""
