"""How every command spells each kind of value: one parser per kind, for every command.

Why one module: ``load --duration 8s`` worked while ``talk --duration 8s`` was refused, and
``--out`` was a path in one command and a string in another (issue 35). Every command line
option and every file format that takes one of these kinds calls the parser here, so a
duration, a rate or an input file is written the same way everywhere and refused with the same
words. Nothing here imports more than the standard library: the command line parses with it
before any heavy import.

Kinds::

    parse_duration("8") == parse_duration("8s") == 8.0; "500ms", "2m", "1.5h"
    parse_rate("2") == parse_rate("2/s") == 2.0; "120/m", "0.5/s"
    input_file("a.wav")      -> Path   (a file that exists; a directory is named as one)
    input_path("scenarios/") -> Path   (a file or a directory that exists)

Each raises ``ValueError`` with a message that names the value and the valid forms; the
command line adds the option's name (duplexctl.cli.options).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Final

#: How a duration may be written, for messages and help.
DURATION_FORMS: Final = "seconds (8), or 8s, 500ms, 2m, 1h"
#: How a rate may be written.
RATE_FORMS: Final = "new sessions per second (2), or 2/s, 120/m"

_DURATION = re.compile(r"^(?P<num>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ms|s|m|h)?$")
_UNIT_S: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_RATE = re.compile(r"^(?P<num>\d+(?:\.\d*)?|\.\d+)\s*(?:/\s*(?P<per>ms|s|m|min|h))?$")
_PER_S: Final = {"ms": 1000.0, "s": 1.0, "m": 1 / 60, "min": 1 / 60, "h": 1 / 3600, None: 1.0}


def parse_duration(text: str | float) -> float:
    """``"250ms"``, ``"60s"``, ``"5m"``, ``"1.5h"`` or a bare number of seconds -> seconds
    (>= 0). A number passes as seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        if not math.isfinite(text) or text < 0:
            raise ValueError(f"{text!r} is not a duration: give {DURATION_FORMS}")
        return float(text)
    match = _DURATION.match(str(text).strip().lower())
    if match is None:
        raise ValueError(f"{str(text)!r} is not a duration: give {DURATION_FORMS}")
    return float(match["num"]) * _UNIT_S[match["unit"]]


def format_duration(seconds: float) -> str:
    """The short form a default is shown in: ``20s``, ``500ms``, ``2m``."""
    if seconds and seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def parse_rate(text: str | float) -> float:
    """``"2"``, ``"2/s"``, ``"120/m"`` -> new sessions per second (> 0)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        match = _RATE.match(str(text).strip().lower())
        if match is None:
            raise ValueError(f"{str(text)!r} is not a rate: give {RATE_FORMS}")
        value = float(match["num"]) * _PER_S[match["per"]]
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{str(text)!r} is not a rate above 0: give {RATE_FORMS}")
    return value


def input_path(text: str | Path) -> Path:
    """A file or a directory that exists (``replay`` takes a directory of scenarios)."""
    path = Path(text).expanduser()
    if not path.exists():
        raise ValueError(f"{text}: no such file or directory")
    return path


def input_file(text: str | Path, *, takes: str = "a file") -> Path:
    """A readable file that exists; a directory is named as a directory (``takes`` says what
    the option wants instead, e.g. "WAV files or one scenario .toml")."""
    path = input_path(text)
    if path.is_dir():
        raise ValueError(f"{text} is a directory: give {takes}")
    if not os.access(path, os.R_OK):
        raise ValueError(f"{text}: not readable (permission denied)")
    return path
