"""``duplexctl`` run in this process through Typer's test runner: for the argument, message
and exit-code checks, where the process boundary is not what is tested (signals, lifelines,
a missing PortAudio and packaging keep their subprocesses).

The runner goes through the very ``app`` and ``reports_errors`` a user's process does; what
a subprocess would have shown as a traceback escapes here as an exception, which
:func:`invoke` fails on, so "one line, no traceback" means the same in both. What a command
changes in the process environment (the TLS policy exports its choice for ``load``'s workers)
is put back afterwards.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from typer.testing import CliRunner


@dataclass(frozen=True)
class Invoked:
    code: int
    stdout: str
    stderr: str


def invoke(*args: str) -> Invoked:
    """``duplexctl ARGS`` in this process: exit code, stdout and stderr apart."""
    from duplexctl.cli import app

    saved = dict(os.environ)
    try:
        result = CliRunner().invoke(app, list(args), catch_exceptions=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"duplexctl {' '.join(args)} raised (a traceback for a user)") from (
            result.exception
        )
    return Invoked(result.exit_code, result.stdout, result.stderr)


def one_line(stderr: str) -> str:
    """The one line a command said on stderr (and no traceback)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]
