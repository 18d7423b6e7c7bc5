"""The suite's fixtures; the helpers behind them live in ``tests/support/`` (imported as
``support.X``, never from here).

* ``wire_dir`` / ``load_wire``: the golden transcripts recorded from the real vLLM-Omni
  0.30.0 server (copied into tests/fixtures/wire so the suite needs nothing outside the repo).
* ``peer``: a factory that starts the real vLLM-Omni peer on a free loopback port with given
  arguments, once per argument set per test session (``support.peer``). Tests using it are
  skipped when the peer's environment has not been built (the kit's ``setup.sh``).
* ``engine_kind``: ``stub`` or ``real``, the engine a transport test's server runs.
* ``cluster``: the one two-node Ray cluster of the test session (``support.cluster``).
* ``pulse_daemon`` / ``pulse_server``: the one private PulseAudio of the test session
  (``support.pulse``), and a test pointed at it.
* ``hostile_server``: a misbehaving server for one test (``support.hostile_servers``).
* one headless Chromium per test process, closed at the end (``support.browser``).

Session-scoped means once per pytest process: under pytest-xdist every worker has its own
session, so the tests that share one of these resources carry the same ``xdist_group``
(docs/testing.md "Lanes and groups") and run on one worker, which starts it once.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.paths import ROOT, WIRE_DIR, read_wire
from support.peer import PeerPool, PeerServer, peer_missing

pytest_plugins = ["support.lanes"]


@pytest.fixture(scope="session")
def wire_dir() -> Path:
    return WIRE_DIR


@pytest.fixture(scope="session")
def load_wire() -> Callable[[str], list[dict[str, Any]]]:
    return read_wire


@pytest.fixture(params=["stub", "real"])
def engine_kind(request: pytest.FixtureRequest) -> str:
    """The server transport tests run twice: on the stub engine of ``support.server`` (the
    contract alone) and on the real ``EngineSession``."""
    return str(request.param)


#: fixture name -> what stops the shared server behind it (see pytest_runtest_teardown)
_RELEASE: dict[str, Callable[[], None]] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """A shared server (the peers, the Ray cluster) is stopped as soon as the next test this
    process runs does not use it, not at the end of the session: an idle peer polls at ~10 %
    of a core and an idle cluster costs its daemons' share, for the rest of a 12-minute run
    on a 2-core machine, beside the timed tests of the quiet lane. A later test that needs it
    again starts it again (tests that share it run in one group, one after another, so that
    is rare)."""
    result = yield
    for fixture, release in _RELEASE.items():
        if _uses(item, fixture) and (nextitem is None or not _uses(nextitem, fixture)):
            release()
    return result


def _uses(item: pytest.Item, fixture: str) -> bool:
    """``item`` takes ``fixture``, or says so by its marker (a module fixture that asks for
    it with ``request.getfixturevalue`` does not name it)."""
    return (
        fixture in getattr(item, "fixturenames", ()) or item.get_closest_marker(fixture) is not None
    )


@pytest.fixture(scope="session")
def _peer_pool() -> Iterator[PeerPool]:
    missing = peer_missing()
    if missing:
        pytest.skip(missing)
    pool = PeerPool(ROOT / ".pytest_cache")
    _RELEASE["peer"] = pool.stop
    try:
        yield pool
    finally:
        _RELEASE.pop("peer", None)
        pool.stop()


@pytest.fixture(scope="module")  # module fixtures take it; the pool restarts what it stopped
def peer(_peer_pool: PeerPool) -> Callable[..., PeerServer]:
    """``peer("--max-sessions", "2")`` -> a running peer (shared by tests asking the same)."""
    return _peer_pool.start


@pytest.fixture(scope="session")
def _clusters() -> Iterator[Any]:
    from support.cluster import SharedCluster

    shared = SharedCluster()
    _RELEASE["cluster"] = shared.release
    try:
        yield shared
    finally:
        _RELEASE.pop("cluster", None)
        shared.release()


@pytest.fixture
def cluster(_clusters: Any) -> Any:
    """The two-node Ray cluster (``support.cluster.two_node_cluster``), started by the first
    test that needs it and shared by the ones that follow it."""
    return _clusters.get()


@pytest.fixture(scope="session", autouse=True)
def _one_browser_per_test_process() -> Iterator[None]:
    """The Chromium a page test starts (support.browser) lives until the test session ends."""
    yield
    from support.browser import close_browser

    close_browser()


collect_ignore_glob: list[str] = []
if sys.platform == "win32":  # pragma: no cover
    collect_ignore_glob.append("test_audio_devices*")


@pytest.fixture(scope="session")
def pulse_daemon() -> Iterator[Any]:
    """The test session's private PulseAudio (support/pulse.py), started once. Skips when
    pulseaudio or PortAudio is missing. Nothing points the process at it: that is
    ``pulse_server``'s, per test, so tests that run later in the same worker (and the
    processes they start) never find a sound server they did not ask for."""
    from support.pulse import pulseaudio_available, start_pulse

    if not pulseaudio_available():
        pytest.skip("pulseaudio/pactl not installed (apt-get install pulseaudio pulseaudio-utils)")
    try:
        import sounddevice  # noqa: F401
    except (OSError, ImportError):
        pytest.skip("PortAudio not installed (apt-get install libportaudio2)")
    server = start_pulse()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pulse_server(pulse_daemon: Any) -> Iterator[Any]:
    """The private PulseAudio for one test: its environment set (``PULSE_SERVER`` …) and
    PortAudio re-initialised to see it; both undone after the test."""
    from duplexctl.audio import devices

    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in pulse_daemon.env.items():
                mp.setenv(key, value)
            devices.reinitialize()
            yield pulse_daemon
    finally:
        devices.reinitialize()


@pytest.fixture
async def hostile_server() -> AsyncIterator[Any]:
    """``await hostile_server("hang")`` -> a running hostile server (support/hostile_servers.py),
    stopped after the test; keyword arguments as for ``hostile_servers.hostile`` (``script=``,
    ``tls=``)."""
    from support.hostile_servers import hostile

    async with contextlib.AsyncExitStack() as stack:

        async def start(kind: str, **options: Any) -> Any:
            return await stack.enter_async_context(hostile(kind, **options))

        yield start
