"""The code checks the project keeps: ruff (lint and format) and mypy, run as the suite runs.

Their configuration is pyproject.toml's (``[tool.ruff]``, ``[tool.mypy]``), their versions
constraints.txt's, so a contributor's `.venv/bin/pytest -q` and CI judge the same code the same
way. They read files only; mypy takes a few seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_finds_nothing() -> None:
    lint = run("ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run("ruff", "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_finds_no_type_errors() -> None:
    checked = run("mypy")  # files and options from pyproject.toml [tool.mypy]
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Success: no issues found" in checked.stdout
