"""Reaching the Ray cluster ``--ray`` names, within a bounded time, and placing the workers.

``ray.init`` on an address where no cluster answers does not fail: it retries for minutes,
printing warnings. A load run must say in one line that the cluster is not there (exit 3,
like an unreachable server), so the address is first checked with a plain TCP connection
(:data:`PROBE_TIMEOUT_S`) and ``ray.init`` itself runs under a bound that suits the address:
:data:`GCS_JOIN_TIMEOUT_S` for a head's GCS port, :data:`CLIENT_JOIN_TIMEOUT_S` for Ray Client.
A Ray Client join the head's proxy aborts is tried again (:data:`CLIENT_JOIN_ATTEMPTS`): Ray
loses a few percent of them to a bug of its own, on a healthy cluster.

Addresses: ``auto`` (``RAY_ADDRESS``, else the cluster ``ray start`` made on this host, which
Ray records in ``/tmp/ray/ray_current_cluster``), ``HOST:PORT`` (the head's GCS port, 6379
by default) or ``ray://HOST:PORT`` (Ray Client, port 10001 by default).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from duplexctl.client.backoff import Backoff
from duplexctl.errors import BadInput, MissingDependency, ServerUnreachable
from duplexctl.load.config import LoadConfig

EXTRA: Final = "pip install 'duplexctl[ray]'"
PROBE_TIMEOUT_S: Final = 5.0
#: Joining through the GCS port: the cluster's processes already run, so a healthy cluster
#: answers within seconds; beyond this, what accepts connections is not (yet) a cluster.
GCS_JOIN_TIMEOUT_S: Final = 30.0
#: How long Ray's proxy holds the data stream of a driver whose join it refused (the client's
#: reconnect grace, Ray's DEFAULT_CLIENT_RECONNECT_GRACE_PERIOD): ``ray.init`` raises the
#: refusal only once that stream has ended.
RAY_CLIENT_RECONNECT_GRACE_S: Final = 30.0
#: How long Ray's proxy waits for the server process it starts per driver (Ray's
#: RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S, 30 s by default). A refused join's log
#: stream waits this long too before ``ray.init`` returns.
RAY_CLIENT_CHANNEL_WAIT_S: Final = 30.0
#: Joining through Ray Client: the head's proxy starts a server process for each driver
#: (importing Ray, joining the cluster) and waits for it, while the client's first call
#: waits on the proxy. A join the proxy refuses ends only after Ray's own clean-up (its
#: channel wait, then the reconnect grace: 60 s with Ray's defaults; a CI run whose bound
#: was 90 s and whose head waited longer reported a healthy cluster as absent), so the
#: bound is those two waits and 60 s for the join itself on a busy head.
CLIENT_JOIN_TIMEOUT_S: Final = RAY_CLIENT_CHANNEL_WAIT_S + RAY_CLIENT_RECONNECT_GRACE_S + 60.0
#: Ray Client's proxy forks a server process for each driver, and Ray (2.60 included) loses
#: some of them to a race between that fork and the proxy's gRPC threads
#: (ray-project/ray#63202, a few percent of joins): the join fails with
#: ``ConnectionAbortedError: Initialization failure from server`` while the cluster is fine.
#: Such a join is tried again (after :class:`~duplexctl.client.backoff.Backoff`'s wait), up
#: to this many attempts in all; any other failure is reported at once.
CLIENT_JOIN_ATTEMPTS: Final = 3
#: Where ``ray start --head`` records the address of the cluster it started on this host.
CURRENT_CLUSTER: Final = Path("/tmp/ray/ray_current_cluster")
#: CPUs each worker actor reserves: one event loop per actor, so one core's worth.
ACTOR_CPUS: Final = 1.0
#: Calls one actor serves at once (Ray's thread pool for it), so a poll is not queued
#: behind another call.
ACTOR_CONCURRENCY: Final = 4


def import_ray() -> ModuleType:
    """The ``ray`` module, or one line naming the extra that installs it (exit 2)."""
    try:
        import ray
    except ImportError:
        raise MissingDependency(f"--ray needs Ray, which is not installed: {EXTRA}") from None
    return ray


@dataclass(frozen=True, slots=True)
class Address:
    """What ``ray.init`` is given, and the host and port that must accept a connection."""

    init: str
    host: str
    port: int

    @property
    def client(self) -> bool:
        """Joined through Ray Client (``ray://``), not a head's GCS port."""
        return self.init.startswith("ray://")

    @property
    def join_timeout_s(self) -> float:
        """How long one ``ray.init`` may take before the address is reported as no cluster."""
        return CLIENT_JOIN_TIMEOUT_S if self.client else GCS_JOIN_TIMEOUT_S


def parse_address(text: str, *, env: dict[str, str] | None = None) -> Address:
    """``--ray`` as given → :class:`Address`; ``BadInput`` / ``ServerUnreachable`` if none."""
    env = dict(os.environ) if env is None else env
    given = text.strip()
    if given == "auto":
        found = env.get("RAY_ADDRESS") or _current_cluster()
        if not found:
            raise ServerUnreachable(
                "--ray auto: no Ray cluster on this host (run `ray start --head`, or set "
                "RAY_ADDRESS)"
            )
        given = found.strip()
    client = given.startswith("ray://")
    rest = given.removeprefix("ray://")
    host, sep, port_text = rest.rpartition(":")
    if not sep:
        host, port_text = rest, "10001" if client else "6379"
    try:
        port = int(port_text)
    except ValueError:
        raise BadInput(f"--ray {text!r}: not auto, HOST:PORT or ray://HOST:PORT") from None
    if not host or not 0 < port < 65536:
        raise BadInput(f"--ray {text!r}: not auto, HOST:PORT or ray://HOST:PORT")
    return Address(
        init=f"ray://{host}:{port}" if client else f"{host}:{port}", host=host, port=port
    )


def _current_cluster() -> str | None:
    try:
        return CURRENT_CLUSTER.read_text().strip() or None
    except OSError:
        return None


def connect(text: str) -> ModuleType:
    """Connect this process to the cluster (once); ``ray`` for the caller's use."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    address = parse_address(text)
    try:
        socket.create_connection((address.host, address.port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise ServerUnreachable(
            f"--ray {text}: no Ray cluster answers at {address.host}:{address.port} ({exc})"
        ) from None
    backoff = Backoff()
    for attempt in range(1, CLIENT_JOIN_ATTEMPTS + 1):
        outcome = _join_once(ray, address)
        if not outcome:
            raise ServerUnreachable(
                f"--ray {text}: {address.host}:{address.port} accepts connections but no Ray "
                f"cluster answered within {address.join_timeout_s:g} s"
            )
        failure = outcome[0]
        if failure is None:
            return ray
        aborted = isinstance(failure, ConnectionAbortedError) and address.client
        if not aborted or attempt == CLIENT_JOIN_ATTEMPTS:
            first = str(failure).strip().splitlines()
            tries = f" in {attempt} attempts" if attempt > 1 else ""
            raise ServerUnreachable(
                f"--ray {text}: could not join the cluster{tries} "
                f"({type(failure).__name__}: {first[0] if first else ''})"
            )
        time.sleep(backoff.delay())
    raise AssertionError("unreachable: the last attempt returns or raises")


def _join_once(ray: ModuleType, address: Address) -> list[BaseException | None]:
    """One ``ray.init`` under :attr:`Address.join_timeout_s`: ``[]`` if it did not end in
    time, ``[None]`` if it joined, ``[exception]`` if it failed."""
    outcome: list[BaseException | None] = []

    def init() -> None:
        try:
            ray.init(
                address=address.init,
                namespace="duplexctl",
                log_to_driver=False,
                logging_level="ERROR",
            )
            outcome.append(None)
        except BaseException as exc:  # reported by the caller, in its thread
            outcome.append(exc)

    # Ray's C++ core logs every retry on file descriptor 2; load's user reads one line, so
    # stderr is quiet while joining (a failure is reported from the exception)
    saved = os.dup(2)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 2)
    try:
        thread = threading.Thread(target=init, name="ray-init", daemon=True)
        thread.start()
        thread.join(address.join_timeout_s)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(quiet)
    return outcome


@dataclass(frozen=True, slots=True)
class Placement:
    """Where worker ``i`` runs: a node id (``--workers-per-node``) or None (SPREAD)."""

    nodes: tuple[str | None, ...]

    @property
    def workers(self) -> int:
        return len(self.nodes)


def place(nodes: list[dict[str, Any]], *, workers: int, per_node: int | None) -> Placement:
    """The workers' placement over ``nodes`` (``ray.nodes()``), checked against their free
    CPUs; ``BadInput`` (one line) if the cluster cannot hold them."""
    alive = sorted(
        (n for n in nodes if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= ACTOR_CPUS),
        key=lambda n: str(n["NodeID"]),
    )
    if not alive:
        raise BadInput("--ray: the cluster has no live node with a CPU for a worker")
    if per_node is not None:
        short = [n["NodeID"][:12] for n in alive if n["Resources"]["CPU"] < per_node * ACTOR_CPUS]
        if short:
            raise BadInput(
                f"--workers-per-node {per_node}: node(s) {', '.join(short)} have fewer CPUs"
            )
        return Placement(tuple(str(n["NodeID"]) for n in alive for _ in range(per_node)))
    cpus = sum(float(n["Resources"]["CPU"]) for n in alive)
    if workers * ACTOR_CPUS > cpus:
        raise BadInput(
            f"--workers {workers}: the cluster's {len(alive)} node(s) have {cpus:g} CPUs "
            f"({ACTOR_CPUS:g} per worker)"
        )
    return Placement((None,) * workers)


def resolve_workers(config: LoadConfig) -> LoadConfig:
    """Connect to ``config.execution.ray`` and fix the worker count the placement gives
    (``--workers-per-node K`` × live nodes), checked against the cluster's CPUs."""
    import dataclasses

    execution = config.execution
    ray = connect(execution.ray or "auto")
    placement = place(ray.nodes(), workers=execution.workers, per_node=execution.workers_per_node)
    return dataclasses.replace(
        config, execution=dataclasses.replace(execution, workers=placement.workers)
    )
