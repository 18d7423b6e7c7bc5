"""The error hierarchy behind duplexctl's exit codes (docs/architecture.md: command-line contract).

Commands raise these; duplexctl.cli.app prints one line naming the problem (no
traceback) and exits with the class's code: 1 a check failed, 2 bad usage or bad input,
3 the server could not be reached or refused the session, 4 a result file could not be
written (the run stopped, its sessions closed). 130: the run was stopped by one of
:data:`STOP_SIGNALS` and ended cleanly (sessions closed, partial results written).
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path
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


class WriteFailed(DuplexctlError):
    """A file of the run's results could not be written (the disk is full, an I/O error, the
    directory was removed, no permission): the run stops, closes its sessions, and keeps
    what it wrote before (whole JSONL lines, the last complete JSON document)."""

    exit_code = 4

    def __init__(self, path: str | Path, exc: OSError) -> None:
        self.path = Path(path)
        self.errno = exc.errno
        name = errno.errorcode.get(exc.errno or 0)
        cause = (
            exc.strerror
            or (os.strerror(exc.errno) if exc.errno else str(exc))
            or type(exc).__name__
        )
        self.cause = cause
        super().__init__(
            f"cannot write {self.path}: {cause}" + (f" ({name})" if name else "") + "; the run "
            "stopped and closed its sessions; what it wrote before is complete"
        )


class SessionStateError(RuntimeError):
    """A client event builder was asked for something the session state cannot support (a
    bug, not bad input)."""


#: What each exit code means, as ``--json``'s error document names it.
EXIT_KINDS: Final = {
    1: "check_failed",
    2: "bad_usage",
    3: "unreachable",
    4: "write_failed",
    130: "interrupted",
}


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
