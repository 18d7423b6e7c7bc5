"""JUnit files as CI reads them: validated against the JUnit schema, read with junitparser.

The schema is Jenkins' xUnit plugin's ``junit-10.xsd`` (``tests/fixtures/junit/``, its source
in the README there), checked with ``xmlschema``; the cases are read back with
``junitparser``, a JUnit library of the kind CI tools use, not with our own parser.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from support.paths import ROOT

SCHEMA = ROOT / "tests" / "fixtures" / "junit" / "junit-10.xsd"


@cache
def _schema() -> Any:
    import xmlschema

    return xmlschema.XMLSchema(str(SCHEMA))


def validate(path: Path) -> None:
    """Raise (naming the element and the rule) when ``path`` breaks the JUnit schema."""
    _schema().validate(str(path))


def cases(path: Path) -> dict[str, tuple[str, str]]:
    """Every case of every suite: name → (passed | failure | error | skipped, message)."""
    from junitparser import Error, Failure, JUnitXml, Skipped

    found: dict[str, tuple[str, str]] = {}
    xml = JUnitXml.fromfile(str(path))
    for suite in xml:
        for case in suite:
            kind, message = "passed", ""
            for result in case.result:
                if isinstance(result, Failure):
                    kind = "failure"
                elif isinstance(result, Error):
                    kind = "error"
                elif isinstance(result, Skipped):
                    kind = "skipped"
                message = result.message or ""
            found[case.name] = (kind, message)
    return found


def suites(path: Path) -> list[Any]:
    from junitparser import JUnitXml

    return list(JUnitXml.fromfile(str(path)))
