"""Where a run's files go: one rule for every command that writes a directory (issue 17.3).

``load --out``, ``replay --out``, ``talk --record``, ``report --out`` and ``report --plot``
all write a directory of files, some of them incrementally (JSONL appended as turns finish,
WAVs per response). Writing into a directory that already holds a run mixed the two: JSONL
appended to, ``report.json`` replaced, the old run's WAVs left beside the new ones. The rule:

* a directory that does not exist, or is empty, is used (and created);
* a non-empty directory is refused in one line (exit 2) — unless ``--overwrite``, which
  empties it first, but only if duplexctl wrote it (it holds :data:`MARKER`, which every
  run directory gets): ``--out . --overwrite`` must never delete someone's files;
* a path that exists and is not a directory is refused in one line (exit 2).

Refusing (rather than a new timestamped directory per run) keeps the path the user gave the
path the files are in, so ``load --out run1`` then ``report run1`` works as written and
scripts need not discover a generated name. Every command ends by saying where its files
went (:func:`announce`), on stderr so that ``--json`` output stays one document.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Final, TextIO

from duplexctl import __version__
from duplexctl.errors import BadInput

#: Written into every run directory; only a directory holding it may be emptied.
MARKER: Final = ".duplexctl-run"


def prepare_run_dir(path: str | Path, *, flag: str, overwrite: bool, command: str) -> Path:
    """Make ``path`` ready for one run's files (see the module docstring); ``BadInput`` (one
    line naming ``flag`` and the problem) if it cannot be used."""
    target = Path(path)
    where = f"{flag} {target}"
    if target.exists() and not target.is_dir():
        raise BadInput(f"{where}: exists and is not a directory")
    if target.is_dir() and any(target.iterdir()):
        if not overwrite:
            raise BadInput(
                f"{where}: directory is not empty (choose a new one, or --overwrite to "
                "replace the run in it)"
            )
        if not (target / MARKER).is_file():
            raise BadInput(
                f"{where}: not empty and not written by duplexctl: not deleting it, even "
                "with --overwrite (choose a new directory)"
            )
        _empty(target)
    try:
        target.mkdir(parents=True, exist_ok=True)
        (target / MARKER).write_text(
            json.dumps(
                {
                    "written_by": f"duplexctl {__version__}",
                    "command": command,
                    "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                }
            )
            + "\n"
        )
    except OSError as exc:
        raise BadInput(f"{where}: cannot write there ({exc.strerror or exc})") from None
    return target


def _empty(directory: Path) -> None:
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def announce(path: str | Path, stream: TextIO | None = None) -> None:
    """The last line of a run that wrote files: where they are."""
    print(f"duplexctl: files written to {Path(path)}/", file=stream or sys.stderr, flush=True)
