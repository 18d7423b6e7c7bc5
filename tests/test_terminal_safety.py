"""No control character a server chose reaches the tester's terminal (issue 31.1).

A hostile duplex server (``support.hostile_servers``, ``Script(plant=PLANTED)``) puts escape
sequences — clear screen, an OSC window title, an OSC 52 clipboard write, BEL, a C1 CSI, DEL —
and rich markup in every string a client shows: the session id, the model, the capabilities,
an error's code and message, the answer's transcript; or refuses the session with them.
``replay``, ``probe``, ``load``, ``report`` and ``talk`` run against it as a user runs them (their
own process, stdout and stderr captured, and on a pseudo-terminal for rich's tables and live
views): not one raw control byte comes out, and the planted text is shown, made visible
(``\\x1b[2J``). Files keep the exact text (JSON), and a CSV cell never starts a formula.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.commands import ROOT, run_cli_async
from support.hostile_servers import CLIP, PLANTED, Script, hostile

from duplexctl.terminal import csv_cell, visible

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(180)]

#: control bytes a line-oriented output may contain: newline (and tab)
_ALLOWED = {ord("\n"), ord("\t")}
#: what rich itself writes on a terminal: colours, the live view's cursor moves and erasing
_RICH_OWN = re.compile(rb"\x1b\[[0-9;]*[mAKGJ]|\x1b\[\?25[lh]|\r")
#: the planted text, as a reader sees it
SHOWN = visible("\x1b[2J\x1b]0;pwned\x07")


def raw_controls(output: bytes, *, tty: bool = False) -> list[str]:
    """The raw control characters in ``output`` (C0 but newline and tab, DEL, C1 as UTF-8);
    on a terminal, rich's own sequences are not counted."""
    if tty:
        output = _RICH_OWN.sub(b"", output)
    text = output.decode("utf-8", errors="replace")
    found = [c for c in text if (ord(c) < 0x20 and ord(c) not in _ALLOWED) or 0x7F <= ord(c) < 0xA0]
    return [repr(c) for c in found]


def strings(doc: Any) -> list[str]:
    """Every string of a JSON document, keys included."""
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        return [s for k, v in doc.items() for s in (k, *strings(v))]
    if isinstance(doc, list):
        return [s for v in doc for s in strings(v)]
    return []


async def run(*args: str) -> tuple[int, bytes]:
    """``duplexctl ARGS`` as its own process: (exit code, stdout + stderr as bytes)."""
    code, out, err = await run_cli_async(*args, timeout=120)
    return code, (out + err).encode()


def run_on_a_terminal(*args: str, timeout: float = 120) -> tuple[int, bytes]:
    """``duplexctl ARGS`` with stdout and stderr on a pseudo-terminal (rich draws)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "duplexctl", *args],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160"},
        stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the process closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(timeout), b"".join(chunks)


REPLAY = ("replay", str(CLIP), "--turn-detection", "none", "--commit", "--pace", "fast")


@pytest.mark.parametrize(
    ("command", "refuse"),
    [
        ((*REPLAY, "--response-timeout-s", "3"), False),
        (REPLAY, True),
        (("probe", "--only", "handshake", "--only", "responses"), False),
        (("talk", "--output-device", "none", "--input-file", str(CLIP), "--duration", "4"), False),
    ],
    ids=["replay", "replay-refused", "probe", "talk"],
)
async def test_a_planted_escape_sequence_is_shown_never_executed(
    command: tuple[str, ...], refuse: bool
) -> None:
    async with hostile("duplex", script=Script(plant=PLANTED, refuse_open=refuse)) as server:
        code, output = await run(*command, "--url", server.url)
    text = output.decode(errors="replace")
    assert raw_controls(output) == [], text
    assert SHOWN in text, text  # shown, escaped: the reader sees what the server sent
    assert "Traceback" not in text and code in (0, 1, 3)


async def test_load_and_report_show_the_planted_codes_escaped_and_csv_keeps_them_text(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    async with hostile("duplex", script=Script(plant=PLANTED, refuse_open=True)) as server:
        code, output = await run(
            "load", str(CLIP), "--url", server.url, "--sessions", "1", "--duration", "2s",
            "--workers", "1", "--plain", "--no-server-metrics", "--out", str(out),
        )  # fmt: skip
    assert code == 3
    assert raw_controls(output) == [] and SHOWN in output.decode()
    code, output = await run("report", str(out))
    assert raw_controls(output) == [] and SHOWN in output.decode(), output.decode()
    # the files keep the exact text: JSON escapes it, a spreadsheet never runs it
    report = json.loads((out / "report.json").read_text())
    assert any(PLANTED in text for text in strings(report))
    with (out / "admission.csv").open(newline="") as fh:
        cells = [cell for row in csv.reader(fh) for cell in row]
    assert f"'{PLANTED}" in cells
    assert not any(cell.startswith(("=", "+", "-", "@")) for cell in cells)
    code, output = await run("report", str(out), "--json")
    assert raw_controls(output) == []
    assert any(PLANTED in text for text in strings(json.loads(output)))


@pytest.mark.parametrize(
    "command",
    [
        (*REPLAY, "--response-timeout-s", "3"),
        ("load", str(CLIP), "--sessions", "1", "--duration", "2s", "--workers", "1", "--live"),
    ],
    ids=["replay", "load"],
)
async def test_on_a_terminal_rich_draws_but_no_planted_sequence_runs(
    command: tuple[str, ...],
) -> None:
    """On a terminal rich draws tables and the live view (its own colours and cursor moves
    reach the terminal); what the server planted is shown, escaped, and no markup in it is
    read as markup."""
    async with hostile("duplex", script=Script(plant=PLANTED)) as server:
        code, output = await asyncio.to_thread(
            run_on_a_terminal, *command, "--url", server.url, "--no-server-metrics"
        )
    text = _RICH_OWN.sub(b"", output).decode(errors="replace")
    assert raw_controls(output, tty=True) == [], text
    assert "\x1b[" in output.decode(errors="replace")  # rich drew (it is a terminal)
    assert code in (0, 1), text
    if command[0] == "replay":
        assert SHOWN in text and "[bold red on white]markup[/]" in text


@pytest.mark.parametrize(
    ("value", "cell"),
    [("=1+1", "'=1+1"), ("+1", "'+1"), ("-x", "'-x"), ("@x", "'@x"), ("\tx", "'\tx"), ("ok", "ok")],
)
def test_a_csv_cell_never_starts_a_formula(value: Any, cell: Any) -> None:
    assert csv_cell(value) == cell
    assert csv_cell(-1.5) == -1.5  # numbers stay numbers
