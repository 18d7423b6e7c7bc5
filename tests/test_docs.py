"""The repository documents itself: docs/ must keep matching the code it describes.

Why tests and not care: the module map, the figure definitions and the section numbers the
code cites drift the moment a module is added, a figure renamed or a section moved, and a
reader has no way to tell. Each check below fails on exactly that drift.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from duplexctl.report.load_report import SESSION_ORIGINS
from duplexctl.report.slo import HISTOGRAM_METRICS, SCALAR_METRICS
from duplexctl.report.turns import ORIGINS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CODE_DIRS = ("duplexctl", "bench", "tests", "tools")
PROSE = (ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted(DOCS.glob("*.md")))

_PACKAGE_HEADING = re.compile(r"^### (duplexctl/\S*)")
_MODULE_ROW = re.compile(r"^\| `([\w.]+\.py)` \|")
#: "protocol.md §6.5", "protocol.md §6.6-6.8", "protocol.md §1.4, §4.1, §6.8", "§7.3/7.4"
_PROTOCOL_CITE = re.compile(
    r"protocol\.md((?:[\s,;(]*(?:and\s+)?§\s?\d+(?:\.\d+)?(?:\s?[-–/]\s?\d+(?:\.\d+)?)?)+)"
)
_SECTION = re.compile(r"\d+(?:\.\d+)?")
#: metrics.md "Heading" (or a quoted phrase) and metrics.md ``figure_name``
_METRICS_QUOTE = re.compile(r'metrics\.md,?\s+"([^"\n]+)')
_METRICS_NAME = re.compile(r"metrics\.md\s+``?([a-z_0-9]+)`")
#: a path of one machine, or a citation of notes outside the repository
_FOREIGN_PATH = re.compile(
    r"(?<![\w.~$])/(?:tmp|work|root|home)/|shared/(?:protocol|metrics|design|testing)\.md"
)


def _code_files() -> list[Path]:
    files = [p for d in CODE_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    files.remove(Path(__file__).resolve())  # its own patterns are examples, not citations
    return [*files, ROOT / "tests" / "fixtures" / "wire" / "README.md"]


def _module_map() -> set[str]:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Module map", 1)[1].split("\n## ", 1)[0]
    found: set[str] = set()
    package: str | None = None
    for line in section.splitlines():
        if heading := _PACKAGE_HEADING.match(line):
            package = heading.group(1).rstrip("/")
        elif (row := _MODULE_ROW.match(line)) and package is not None:
            found.add(f"{package}/{row.group(1)}")
    return found


def test_module_map_lists_exactly_the_modules_in_the_tree() -> None:
    tree = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "duplexctl").rglob("*.py")
        if p.name != "__init__.py"
    }
    documented = _module_map()
    assert sorted(tree - documented) == [], "modules missing from docs/architecture.md"
    assert sorted(documented - tree) == [], "docs/architecture.md lists modules that do not exist"


def _protocol_sections() -> set[str]:
    text = (DOCS / "protocol.md").read_text(encoding="utf-8")
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, flags=re.MULTILINE))


def test_protocol_keeps_its_section_numbering() -> None:
    sections = _protocol_sections()
    expected = {str(n) for n in range(13)} | {
        *(f"1.{i}" for i in range(1, 7)),
        *(f"3.{i}" for i in range(1, 6)),
        *(f"4.{i}" for i in range(1, 6)),
        *(f"6.{i}" for i in range(1, 10)),
        *(f"7.{i}" for i in range(1, 7)),
        "8.1",
        "8.2",
    }
    assert sorted(expected - sections) == []


def test_every_cited_protocol_section_exists() -> None:
    sections = _protocol_sections()
    missing = []
    for path in [*_code_files(), *PROSE]:
        for cite in _PROTOCOL_CITE.finditer(path.read_text(encoding="utf-8")):
            for number in _SECTION.findall(cite.group(1)):
                if number not in sections:
                    missing.append(f"{path.relative_to(ROOT)}: §{number}")
    assert missing == []


def test_every_cited_metrics_heading_and_figure_exists() -> None:
    metrics = (DOCS / "metrics.md").read_text(encoding="utf-8")
    missing = []
    for path in [*_code_files(), *PROSE]:
        text = path.read_text(encoding="utf-8")
        for quote in _METRICS_QUOTE.finditer(text):
            phrase = re.split(r"\.\.\.|…", quote.group(1))[0].strip()
            if phrase not in metrics:
                missing.append(f'{path.relative_to(ROOT)}: "{phrase}"')
        for name in _METRICS_NAME.finditer(text):
            if f"`{name.group(1)}`" not in metrics:
                missing.append(f"{path.relative_to(ROOT)}: {name.group(1)}")
    assert missing == []


@pytest.mark.parametrize(
    "name",
    sorted(
        {*ORIGINS, *SESSION_ORIGINS, *HISTOGRAM_METRICS, *SCALAR_METRICS}
        | {"local_stop_ms", "invalid_pacing", "early_start", "outcome"}
    ),
)
def test_every_figure_is_defined_in_metrics_md(name: str) -> None:
    metrics = (DOCS / "metrics.md").read_text(encoding="utf-8")
    assert f"`{name}`" in metrics


def test_every_pushed_series_is_listed_in_metrics_md() -> None:
    """--prometheus-rw's names (duplexctl/export/names.py) beside their figures."""
    from duplexctl.export.names import FAMILIES

    section = (DOCS / "metrics.md").read_text(encoding="utf-8").split("## Remote write", 1)[1]
    assert [name for name in FAMILIES if f"`{name}`" not in section] == []


def test_prose_names_no_path_of_a_particular_machine() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in PROSE
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _FOREIGN_PATH.search(line)
    ]
    assert found == []
