"""Imports run one way (issue 15.4): ``report`` below ``load``, no cycle inside ``load``.

``duplexctl report`` re-renders and merges saved files; it must not load websockets, the
client or the scenario runner to do so. Checked two ways: statically (no module of
``duplexctl/report`` imports anything above it; ``duplexctl/load`` has no import cycle) and
by running the command in a fresh interpreter and reading its ``sys.modules``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from support.commands import ROOT, saved_load_run

PACKAGE = ROOT / "duplexctl"
#: What the report layer may never import: load's runtime and everything that talks on a socket.
ABOVE_REPORT = (
    "duplexctl.load",
    "duplexctl.client",
    "duplexctl.scenario",
    "duplexctl.talk",
    "duplexctl.probe",
    "duplexctl.server",
    "websockets",
    "uvloop",
)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at top level or inside functions."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_report_imports_nothing_above_it() -> None:
    upward = {
        _module(path): sorted(m for m in _imports(path) if m.startswith(ABOVE_REPORT))
        for path in sorted((PACKAGE / "report").glob("*.py"))
    }
    assert {m: names for m, names in upward.items() if names} == {}


def test_load_modules_import_each_other_without_a_cycle() -> None:
    modules = {_module(p): p for p in (PACKAGE / "load").glob("*.py")}
    graph = {
        name: {m for m in _imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(name: str, trail: list[str]) -> None:
        if state.get(name) == 2:
            return
        assert state.get(name) != 1, "import cycle: " + " -> ".join([*trail, name])
        state[name] = 1
        for dep in sorted(graph[name]):
            visit(dep, [*trail, name])
        state[name] = 2

    for name in sorted(graph):
        visit(name, [])


PROBE = """
import json, sys
sys.argv = ["duplexctl", "report", sys.argv[1]]
from duplexctl.cli import app
try:
    app()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def test_report_command_loads_neither_websockets_nor_the_runner(tmp_path: Path) -> None:
    saved = saved_load_run(tmp_path / "run")
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(saved)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    result = json.loads(run.stderr.strip().splitlines()[-1])
    assert result["code"] in (0, None), run.stderr
    assert "observed capacity" in run.stdout  # it did re-render the run
    loaded = [m for m in result["modules"] if m.startswith(ABOVE_REPORT)]
    assert loaded == []
