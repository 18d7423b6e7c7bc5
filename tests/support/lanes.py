"""Lanes and groups: how ``pytest -q`` runs the suite in parallel without weakening a test.

Most of the suite waits on a clock (real-time replays and loads), not on the CPU, so it runs
under pytest-xdist (``pyproject.toml`` ``addopts``: ``-n``, ``--dist loadgroup``) with three
rules this plugin adds (docs/testing.md "Lanes and groups"):

* **One worker per shared resource.** A session fixture is started once per pytest process,
  and every xdist worker is one, so the tests that share the Ray cluster, the private
  PulseAudio or the vLLM-Omni peer are put in one group each (by the fixture they use,
  :data:`RESOURCE_GROUPS`, or their marker, :data:`MARKER_GROUPS`): one worker runs them,
  starts the resource once, and two of them never run at the same time.
* **One worker per module fixture.** The tests of a module that share a module-scoped
  fixture (two saved load runs, every README example run once) stay together, so the
  fixture is built once, as it is without xdist.
* **The quiet lane: time bounds run on a quiet machine.** A test marked ``timing`` asserts a
  time bound that holds on a quiet machine but may not beside busy workers. Those tests form
  one group, :data:`SERIAL`, which runs first, one test at a time, on the quiet worker
  (:data:`QUIET_WORKER`). Every test runs at a CPU priority by what it needs
  (:func:`niceness`): a timed test at normal priority (nice 0), a test that waits on a real
  clock (``realtime``: a real-time replay whose barge-in must land while the answer plays)
  at nice :data:`REALTIME_NICE`, everything else — computation that only has to finish —
  at nice :data:`BACKGROUND_NICE`, the lowest. Linux's scheduler shares a contended core by
  weight (nice 0 : 10 : 19 ≈ 1024 : 110 : 15) and lets a waking higher-priority thread
  preempt a lower one, so the timed tests (and the servers and clients they start, which
  inherit the priority of the thread that starts them) see an idle machine as long as they
  need less than the two cores, real-time tests keep their margins against the CPU-bound
  ones, and the rest of the suite runs on what is left. Once the quiet worker has run the
  timed tests it takes ordinary work like the others.

The work units (a group, or a single test) are handed out longest first, by the durations
measured last (``tests/durations.json``, refreshed with ``--lanes-record``; a test it does
not know counts :data:`UNKNOWN_S`), so the long single-worker groups start at once and the
short tests fill the other workers around them. Without xdist (``-n 0``, or ``-p
no:xdist``) none of this changes anything: every test runs in one process, in collection
order, at the priority it was started with.

How a group reaches the scheduler: xdist's own ``--dist loadgroup`` marks a group by
appending ``@group`` to the node id (``item._nodeid``), which pytest 9.2's structured node
ids no longer read, so every group silently ran spread over all workers (four peers and
four PulseAudio daemons at once). Here each worker writes ``{node id: group}`` to a file the
controller named in its ``workerinput`` (:func:`pytest_configure_node`), and the scheduler
reads its units from that file: nothing depends on node-id internals.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

#: the group every test marked ``timing`` is put in; run first, on the quiet worker
SERIAL = "serial"
#: the xdist worker that runs the serial group at normal priority
QUIET_WORKER = "gw0"
#: the niceness of a ``realtime`` test that asserts no time bound (it waits on a clock)
REALTIME_NICE = 10
#: the niceness of every other test (the lowest CPU priority Linux has)
BACKGROUND_NICE = 19
#: fixture -> the group of every test that uses it (directly or through another fixture)
RESOURCE_GROUPS = {"cluster": "ray", "pulse_daemon": "pulse", "peer": "peer"}
#: marker -> the group it implies (a module marks its ``audio`` tests, which share the daemon)
MARKER_GROUPS = {"cluster": "ray", "audio": "pulse", "peer": "peer"}
#: the measured durations the scheduler orders the work by
DURATIONS = Path(__file__).resolve().parent.parent / "durations.json"
#: what a test the durations file does not know is taken to cost, in seconds
UNKNOWN_S = 2.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lanes-record",
        action="store_true",
        help="write the measured duration (setup + call + teardown) of every test that ran "
        "into tests/durations.json, which orders the parallel run longest first",
    )


def _module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


def group_of(item: pytest.Item) -> str | None:
    """The one group ``item`` runs in, or None (scheduled test by test)."""
    if item.get_closest_marker("timing") is not None:
        return SERIAL
    explicit = item.get_closest_marker("xdist_group")
    if explicit is not None:  # a test that names its group itself
        return str(explicit.args[0] if explicit.args else explicit.kwargs.get("name", "default"))
    fixtures = set(getattr(item, "fixturenames", ()))
    for fixture, group in RESOURCE_GROUPS.items():
        if fixture in fixtures:
            return group
    for marker, group in MARKER_GROUPS.items():
        if item.get_closest_marker(marker) is not None:
            return group
    if _module_fixture(item):
        return item.nodeid.split("::", 1)[0]  # its module
    return None


#: the workerinput key of the file every worker writes its groups to
GROUPS_KEY = "lanes_groups_file"
#: a test that costs this many seconds or more (measured: tests/durations.json) is ``slow``
SLOW_S = 10.0


def mark_measured_slow(items: list[pytest.Item], groups: dict[str, str]) -> None:
    """Mark ``slow`` every test that costs :data:`SLOW_S` or more by the last measurement,
    so the quick loop (``-m "not slow"``) leaves out what is slow now, not what someone
    thought slow once. The tests of a module that share a module fixture run together and
    pay for it together: each costs what the module's group costs. A test the file does
    not know is not marked (its ``@pytest.mark.slow``, if any, still holds)."""
    durations = measured_durations()
    shared = {SERIAL, *RESOURCE_GROUPS.values(), *MARKER_GROUPS.values()}
    group_cost: dict[str, float] = defaultdict(float)
    for item in items:
        group = groups.get(item.nodeid)
        if group is not None and group not in shared:
            group_cost[group] += durations.get(item.nodeid, 0.0)
    for item in items:
        group = groups.get(item.nodeid)
        cost = group_cost[group] if group in group_cost else durations.get(item.nodeid, 0.0)
        if cost >= SLOW_S and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = {item.nodeid: group for item in items if (group := group_of(item)) is not None}
    mark_measured_slow(items, groups)
    for item in items:
        if item.nodeid in groups and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))  # as it runs
    target = getattr(config, "workerinput", {}).get(GROUPS_KEY)
    if target:  # a worker: tell the controller's scheduler (every worker writes the same)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target))
        with os.fdopen(fd, "w") as out:
            json.dump(groups, out)
        os.replace(tmp, target)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown with -p no:xdist
def pytest_configure_node(node: Any) -> None:
    """The controller names the file its workers write their groups to."""
    config = node.config
    if not hasattr(config, "_lanes_groups_file"):
        folder = tempfile.mkdtemp(prefix="duplexctl-lanes-")
        config._lanes_groups_file = os.path.join(folder, "groups.json")
    node.workerinput[GROUPS_KEY] = config._lanes_groups_file


def _plain_id(nodeid: str) -> str:
    """A node id without the ``@group`` suffix xdist adds."""
    at, bracket = nodeid.rfind("@"), nodeid.rfind("]")
    return nodeid[:at] if at > bracket else nodeid


class _Recorder:
    """``--lanes-record``: sums each test's phases and writes the file at the end."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_plain_id(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if getattr(session.config, "workerinput", None) is not None:
            return  # a worker: the controller sees every report and writes once
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return  # a partial run measures nothing worth keeping
        merged = {**measured_durations(), **self.seconds}  # a subset updates its own tests
        ordered = {k: round(v, 2) for k, v in sorted(merged.items())}
        DURATIONS.write_text(json.dumps(ordered, indent=0) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--lanes-record"):
        config.pluginmanager.register(_Recorder(), "lanes-recorder")


def niceness(item: pytest.Item) -> int:
    """The CPU priority ``item`` runs at under xdist (the module docstring's tiers)."""
    if item.get_closest_marker("timing") is not None:
        return 0
    if item.get_closest_marker("realtime") is not None:
        return REALTIME_NICE
    return BACKGROUND_NICE


@pytest.hookimpl(tryfirst=True)  # before the fixtures it needs are set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under xdist, the test's thread (and so every thread and process it starts) takes the
    test's priority. Linux keeps a nice value per thread, and only a privileged process may
    raise its priority again: without that right a worker stays at the lowest it reached."""
    if getattr(item.config, "workerinput", None) is None:
        return  # -n 0: the priority it was started with
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, niceness(item))


def measured_durations() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # an xdist hook: unknown with -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup``: the lanes' scheduler; otherwise xdist decides."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return _lanes_scheduling()(config, log)


def _lanes_scheduling() -> type:
    """The class, built on xdist's only when xdist runs (so ``-p no:xdist`` imports nothing)."""
    from xdist.scheduler.loadscope import LoadScopeScheduling

    durations = measured_durations()

    class LanesScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's scope scheduling with the lanes' units: the serial unit to the quiet
        worker first, every other unit longest first to whichever worker asks."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                path = getattr(self.config, "_lanes_groups_file", None)
                try:
                    with open(path or "") as found:
                        self.groups = dict(json.load(found))
                except (OSError, ValueError):
                    self.groups = {}
            return self.groups.get(_plain_id(nodeid), nodeid)

        def _cost(self, scope: str) -> float:
            unit = self.workqueue[scope]
            return sum(durations.get(_plain_id(nodeid), UNKNOWN_S) for nodeid in unit)

        def _quiet(self, node: Any) -> bool:
            """``node`` runs the serial unit: the quiet worker, or any worker once the quiet
            one is gone (it crashed) or was never started."""
            live = {n.gateway.id for n in self.nodes}
            return node.gateway.id == QUIET_WORKER or QUIET_WORKER not in live

        def _next_scope(self, node: Any) -> str | None:
            if SERIAL in self.workqueue and self._quiet(node):
                return SERIAL
            queued = [scope for scope in self.workqueue if scope != SERIAL]
            return max(queued, key=self._cost) if queued else None

        def _assign_work_unit(self, node: Any) -> None:
            scope = self._next_scope(node)
            if scope is None:  # only the serial unit is left, and it is the quiet worker's
                node.shutdown()
                return
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some(
                [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
            )

    return LanesScheduling
