"""Lanes and groups: how ``pytest -q`` runs the suite in parallel without weakening a test.

Most of the suite waits on a clock (real-time replays and loads), not on the CPU, so it runs
under pytest-xdist (``pyproject.toml`` ``addopts``: ``-n``, ``--dist loadgroup``) with two
rules this plugin adds (docs/testing.md "Lanes and groups"):

* **Groups: one worker per shared resource.** A session fixture is started once per pytest
  process, and every xdist worker is one, so the tests that share the Ray cluster, the
  private PulseAudio or the vLLM-Omni peer are put in one ``xdist_group`` each (by the
  fixture they use, :data:`RESOURCE_GROUPS`): one worker runs them and starts the resource
  once, and two of them never run at the same time.
* **The serial lane: time bounds run alone.** A test marked ``timing`` asserts a time bound
  that holds on a quiet machine but may not beside three other workers. They form one group,
  :data:`SERIAL`, which :class:`LanesScheduling` holds back until every other test has run
  and every other worker has stopped, and then runs on one worker, alone.

Groups are scheduled longest first (:data:`GROUP_ORDER`), so the long single-worker groups
start at once and the short tests fill the other workers around them.

Without xdist (``-n 0``, or ``-p no:xdist``) the markers change nothing: every test runs in
one process, in collection order.
"""

from __future__ import annotations

from typing import Any

import pytest

#: the group every test marked ``timing`` is put in; run last, alone
SERIAL = "serial"
#: fixture -> the group of every test that uses it (directly or through another fixture)
RESOURCE_GROUPS = {"cluster": "ray", "pulse_server": "pulse", "peer": "peer"}
#: marker -> the group it implies (the module marks ``audio`` tests that share the daemon)
MARKER_GROUPS = {"cluster": "ray", "audio": "pulse", "peer": "peer"}
#: the single-worker groups, longest first (measured: docs/testing.md "Where the time goes")
GROUP_ORDER = ("ray", "peer", "pulse")


def group_of(item: pytest.Item) -> str | None:
    """The one group ``item`` runs in, or None (scheduled test by test)."""
    if item.get_closest_marker("timing") is not None:
        return SERIAL
    fixtures = set(getattr(item, "fixturenames", ()))
    for fixture, group in RESOURCE_GROUPS.items():
        if fixture in fixtures:
            return group
    for marker, group in MARKER_GROUPS.items():
        if item.get_closest_marker(marker) is not None:
            return group
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook appends "@group" to the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # an xdist hook: unknown with -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup``: :class:`LanesScheduling`; otherwise xdist decides."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return _lanes_scheduling()(config, log)


def _lanes_scheduling() -> type:
    """The class, built on xdist's only when xdist runs (so ``-p no:xdist`` imports nothing)."""
    from xdist.scheduler.loadgroup import LoadGroupScheduling

    class LanesScheduling(LoadGroupScheduling):  # type: ignore[misc]
        """xdist's group scheduling, with the groups longest first and the serial lane last.

        The serial unit stays in the work queue while anything else is queued. Once it is
        all that is left, every worker but one (the one with the most tests still pending)
        is shut down as it asks for work; when the others are gone, the serial unit goes to
        that last worker, which runs it alone."""

        def _next_scope(self) -> str | None:
            queued = [scope for scope in self.workqueue if scope != SERIAL]
            for group in GROUP_ORDER:
                if group in self.workqueue:
                    return group
            if queued:
                return queued[0]
            if SERIAL in self.workqueue and len(self.nodes) == 1:
                return SERIAL
            return None  # held until this is the last worker (remove_node)

        def _assign_work_unit(self, node: Any) -> None:
            scope = self._next_scope()
            if scope is None:
                return
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some(
                [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
            )

        def _live(self) -> list[Any]:
            return [n for n in self.nodes if not n.shutting_down]

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if list(self.workqueue) != [SERIAL]:
                super()._reschedule(node)
                return
            if len(self.nodes) == 1:
                self._assign_work_unit(node)
                return
            if self._pending_of(self.assigned_work[node]) > 2:
                return
            live = self._live()
            keeper = max(live, key=lambda n: self._pending_of(self.assigned_work[n]))
            if node is not keeper:
                node.shutdown()  # runs what it holds, then leaves (remove_node)

        def remove_node(self, node: Any) -> str | None:
            crashed = super().remove_node(node)
            if list(self.workqueue) == [SERIAL] and len(self.nodes) == 1:
                self._assign_work_unit(self.nodes[0])
            return crashed

    return LanesScheduling
