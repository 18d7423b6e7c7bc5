"""The error hierarchy behind duplexctl's exit codes (docs/architecture.md: command-line contract).

Commands raise these; duplexctl.cli.app prints one line naming the problem (no
traceback) and exits with the class's code: 1 a check failed, 2 bad usage or bad input,
3 the server could not be reached or refused the session. 130: the run was stopped by one of
:data:`STOP_SIGNALS` and ended cleanly (sessions closed, partial results written).
"""

from __future__ import annotations

import signal
from typing import Final

#: Signals that stop a run the way Ctrl-C does: Ctrl-C itself, and SIGTERM, which a service
#: manager, a container runtime or ``kill`` sends (left to its default action it would end the
#: process with its sessions dropped rather than closed, and nothing written).
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


class DuplexctlError(Exception):
    """Base class; ``exit_code`` is what the process exits with."""

    exit_code = 1


class CheckFailed(DuplexctlError):
    """An expectation, invariant, probe or SLO threshold failed."""

    exit_code = 1


class BadInput(DuplexctlError):
    """Unreadable audio, a malformed scenario or option: the user must fix the input."""

    exit_code = 2


class MissingDependency(BadInput):
    """A system library or device the command needs is not there (e.g. PortAudio)."""


class ServerUnreachable(DuplexctlError):
    """The server could not be reached, or the handshake failed (rejection included)."""

    exit_code = 3


class SessionStateError(RuntimeError):
    """A client event builder was asked for something the session state cannot support (a
    bug, not bad input)."""


#: What each exit code means, as ``--json``'s error document names it.
EXIT_KINDS: Final = {1: "check_failed", 2: "bad_usage", 3: "unreachable", 130: "interrupted"}


def error_document(command: str, exit_code: int, message: str) -> dict[str, object]:
    """The one JSON document ``--json`` prints when a command ends without its report (bad
    usage, an unreachable server, Ctrl-C before anything ran): a script reading stdout always
    gets one document (docs/cli.md "Exit codes and --json")."""
    return {
        "command": command,
        "ok": False,
        "exit_code": exit_code,
        "error": {"kind": EXIT_KINDS.get(exit_code, "error"), "message": message},
    }
