"""The ``duplexctl`` command line: a thin Typer layer, one module per command.

Why a package and not one file: each command declares 15-50 options with their panels, help
and examples; one 1 200-line module mixed six commands' declarations with the logic they
called. Now a command's module holds only its options and a few lines that build its config,
call one function of the package (``run_load``, ``scenario.command.run`` …) and return its
exit code; everything that decides — validation, run directories, partial reports, value
parsing — lives in the package, where the tests and the other commands reach it. Shared
options (``--url``, ``--session`` …) are declared once in :mod:`duplexctl.cli.options`; the
help page and docs/cli.md come from :mod:`duplexctl.cli.help`; errors take one path,
:mod:`duplexctl.cli.app`.

Heavy imports (numpy, websockets, sounddevice) happen inside the commands so ``duplexctl
--help`` stays fast and every command but ``talk`` works without PortAudio.
"""

from __future__ import annotations

from typing import Any

from duplexctl.cli import load, probe, replay, report, serve, talk  # noqa: F401  # registers them
from duplexctl.cli.app import app

__all__ = ["app", "main", "reference_markdown"]


def main() -> None:
    """Console-script entry point."""
    app()


def reference_markdown() -> str:
    """docs/cli.md's generated part: every command, every option, its default and
    environment variable (tools/cli_reference.py writes it; tests/test_cli_help.py checks it)."""
    import typer
    from typer.main import get_command

    from duplexctl.cli.help import describe, reference

    group: Any = get_command(app)
    docs = []
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        docs.append(describe(command, typer.Context(command, info_name=name)))
    return reference(docs)
