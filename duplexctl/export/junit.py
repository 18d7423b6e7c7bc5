"""``--junit FILE``: a command's verdicts as JUnit XML, the file CI systems read.

The format is the one Jenkins' xUnit plugin describes in ``junit-10.xsd`` (what GitLab,
GitHub's test reporters, Azure DevOps and junitparser read): ``<testsuites>`` holding one
``<testsuite>`` per suite, each ``<testcase>`` passed, or carrying ``<failure>`` (a verdict
that failed, its evidence in the element's text), ``<error>`` (the check could not run: the
server unreachable, the run interrupted) or ``<skipped>`` (with the reason).
``tests/test_export_junit.py`` validates every command's file against that schema and reads
it back with junitparser.

The model is small on purpose — :class:`Case`, :class:`Suite`, :func:`write` — so one
command run can write several suites (a ``replay`` of several scenarios: one
``<testsuite>`` per scenario, :func:`duplexctl.export.junit_cases.replay_suite` each). The
XML is built by the standard library's ElementTree (escaping and encoding are its); the
file is replaced atomically, so a reader never sees half of it and a run that writes it
after each probe leaves a valid file when it is interrupted.
"""

from __future__ import annotations

import socket
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from duplexctl.errors import BadInput
from duplexctl.rundir import write_atomic

PASSED: Final = "passed"
FAILURE: Final = "failure"
ERROR: Final = "error"
SKIPPED: Final = "skipped"
#: characters XML 1.0 cannot hold (control characters but tab, newline, carriage return)
_ILLEGAL: Final = dict.fromkeys([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20)], "?")


@dataclass(slots=True)
class Case:
    """One test case: ``outcome`` is passed, failure, error or skipped; ``message`` one line
    (the verdict or the reason), ``text`` the evidence."""

    name: str
    classname: str
    outcome: str = PASSED
    message: str = ""
    text: str = ""
    time_s: float = 0.0
    output: str = ""  # system-out: what was measured, also on a pass


@dataclass(slots=True)
class Suite:
    name: str
    cases: list[Case] = field(default_factory=list)
    time_s: float = 0.0
    properties: dict[str, str] = field(default_factory=dict)
    timestamp: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))

    def count(self, outcome: str) -> int:
        return sum(c.outcome == outcome for c in self.cases)


def check_path(path: str | Path) -> Path:
    """``--junit FILE`` before the run: its folder must exist and it must not be a folder
    (exit 2 otherwise, so a typo does not cost a run its verdict file)."""
    target = Path(path)
    if target.is_dir():
        raise BadInput(f"--junit {path}: is a directory; give a file name (e.g. junit.xml)")
    if not target.parent.is_dir():
        raise BadInput(f"--junit {path}: no such directory {target.parent}")
    return target


def _clean(text: str) -> str:
    return text.translate(_ILLEGAL)


def _seconds(value: float) -> str:
    return f"{max(0.0, value):.3f}"


def document(suites: Iterable[Suite], name: str = "duplexctl") -> ET.Element:
    """The ``<testsuites>`` element of ``suites``."""
    suites = list(suites)
    root = ET.Element("testsuites", name=name)
    totals = {"tests": 0, "failures": 0, "errors": 0}
    total_time = 0.0
    for suite in suites:
        el = ET.SubElement(
            root,
            "testsuite",
            name=_clean(suite.name),
            tests=str(len(suite.cases)),
            failures=str(suite.count(FAILURE)),
            errors=str(suite.count(ERROR)),
            skipped=str(suite.count(SKIPPED)),
            time=_seconds(suite.time_s),
            timestamp=suite.timestamp,
            hostname=socket.gethostname(),
        )
        totals["tests"] += len(suite.cases)
        totals["failures"] += suite.count(FAILURE)
        totals["errors"] += suite.count(ERROR)
        total_time += suite.time_s
        if suite.properties:
            props = ET.SubElement(el, "properties")
            for key, value in suite.properties.items():
                ET.SubElement(props, "property", name=_clean(key), value=_clean(str(value)))
        for case in suite.cases:
            _case(el, case)
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", str(totals["errors"]))
    root.set("time", _seconds(total_time))
    return root


def _case(parent: ET.Element, case: Case) -> None:
    el = ET.SubElement(
        parent,
        "testcase",
        name=_clean(case.name),
        classname=_clean(case.classname),
        time=_seconds(case.time_s),
    )
    if case.outcome != PASSED:
        verdict = ET.SubElement(el, case.outcome, message=_clean(case.message))
        if case.outcome != SKIPPED:
            verdict.set("type", case.outcome)
        if case.text:
            verdict.text = _clean(case.text)
    if case.output:
        ET.SubElement(el, "system-out").text = _clean(case.output)


def write(path: str | Path, suites: Iterable[Suite]) -> Path:
    """Write ``suites`` to ``path`` (atomically: rundir.write_atomic; a write that fails is
    :class:`~duplexctl.errors.WriteFailed`, exit 4)."""
    target = Path(path)
    root = document(suites)
    ET.indent(root)
    data = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    write_atomic(target, data)
    return target


def properties(values: Mapping[str, object]) -> dict[str, str]:
    """Suite properties from a mapping, None values left out."""
    return {k: str(v) for k, v in values.items() if v is not None}
