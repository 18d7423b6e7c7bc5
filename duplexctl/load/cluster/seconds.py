"""Live per-second slices of a ``--ray`` run: what each worker took in each second, sent to
the driver while the run goes and added up there into the cluster's seconds.

**On a worker** (:class:`SecondTally`, fed by the worker's
:class:`~duplexctl.load.recorder.Recorder`): every turn (its count, ``ttfa_ms``,
``turn_ms``), every session's end (its admission, errors, drops) and every batch of send
lags also goes into the *open* second. At each whole second from the worker's origin — the
driver's common start on the worker's own clock (``origin + offset``), so second ``k`` is
``[k, k + 1)`` s on the driver's clock — the engine's ticker
(:func:`duplexctl.load.workers.run_share`) cuts it: ``("second", index, delta)`` waits for
the driver's next poll, with the process's CPU over that second. A second holds what the
recorder *received* in it, not what happened in it (a turn is complete seconds after its end
of speech): so once cut it never changes, is sent once, and a worker's seconds add up to its
whole recorder exactly (the last, partial second is cut when the run ends).

**On the driver** (:class:`ClusterSeconds`): a cluster second is complete once every worker
still running has sent it; its totals are the sum of the workers' deltas (histograms bucket
for bucket). Complete seconds feed the dashboard (the last second's totals; each node's CPU
over it) and ``--out``'s ``seconds.jsonl``: one line per second with the cluster's counts and
histograms (encoded, mergeable) and each worker's counts, figure counts and CPU.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np

from duplexctl.report.histogram import HistogramSet
from duplexctl.rundir import JsonLines, Writes

#: The turn figures a second keeps a histogram of (with ``send_lag_ms``).
TURN_FIGURES: Final = ("ttfa_ms", "turn_ms")
SEND_LAG: Final = "send_lag_ms"
#: The counts of a second (admissions by kind: admitted, rejected_capacity, failed).
COUNTS: Final = ("turns", "admitted", "rejected_capacity", "failed", "errors", "drops")


class SecondTally:
    """A worker's open second, and its cut (see the module docstring)."""

    def __init__(self, origin: float) -> None:
        self.origin = origin
        self.second = 0
        self.counts: Counter[str] = Counter()
        self.histograms = HistogramSet()
        self._cpu = (time.process_time(), time.monotonic())

    def turn(self, figures: Mapping[str, float | None]) -> None:
        self.counts["turns"] += 1
        for name in TURN_FIGURES:
            self.histograms.record(name, figures.get(name))

    def session(self, admission: str, errors: int, drops: int) -> None:
        """A session ended (an attempt; not one the run stopped while it was opening)."""
        kind = admission if admission in ("admitted", "rejected_capacity") else "failed"
        self.counts[kind] += 1
        self.counts["errors"] += errors
        self.counts["drops"] += drops

    def send_lags(self, values: np.ndarray) -> None:
        if values.size:
            self.histograms.histogram(SEND_LAG).record_array(values)

    @property
    def due(self) -> float:
        """The monotonic instant the open second ends."""
        return self.origin + self.second + 1

    def cut(self, active: int) -> dict[str, Any]:
        """The open second as a delta (JSON-safe); the next one opens."""
        cpu, wall = time.process_time(), time.monotonic()
        spent = wall - self._cpu[1]
        delta = {
            "second": self.second,
            "counts": {name: self.counts[name] for name in COUNTS},
            "active": active,
            "cpu_percent": round(100 * (cpu - self._cpu[0]) / spent, 1) if spent > 0 else 0.0,
            "histograms": self.histograms.encode(),
        }
        self.second += 1
        self.counts, self.histograms, self._cpu = Counter(), HistogramSet(), (cpu, wall)
        return delta


def figure_counts(histograms: HistogramSet) -> dict[str, int]:
    return {name: hist.count for name, hist in histograms.items()}


class ClusterSeconds:
    """The driver's per-second cluster totals (see the module docstring)."""

    def __init__(self, out: Path | None, writes: Writes | None = None) -> None:
        self.path = None if out is None else out / "seconds.jsonl"
        # a failed append goes to the run's writes (rundir.py): the run stops, exit 4
        self._file = None if self.path is None else JsonLines(self.path, writes, append=True)
        self.pending: dict[int, dict[int, dict[str, Any]]] = {}  # second → worker → delta
        self.received: dict[int, int] = {}  # worker → seconds received (the next index)
        self.next = 0  # the next cluster second to complete
        self.last: dict[str, Any] | None = None  # the newest complete one, for the dashboard

    def add(self, worker: int, delta: dict[str, Any]) -> None:
        """One worker's second (each taken once, in order)."""
        k = int(delta["second"])
        if k < self.received.get(worker, 0):
            return
        self.received[worker] = k + 1
        self.pending.setdefault(k, {})[worker] = delta

    def complete(self, running: Iterable[int]) -> list[dict[str, Any]]:
        """The cluster seconds every worker in ``running`` has sent (all that are left once
        none runs), summed, in order; appended to ``seconds.jsonl``."""
        running = list(running)
        rows = []
        while all(self.received.get(w, 0) > self.next for w in running):
            parts = self.pending.pop(self.next, None)
            if parts is None and (running or not self.pending):
                break
            rows.append(total(self.next, parts or {}))
            self.next += 1
        if rows:
            self.last = rows[-1]
            if self._file is not None:
                self._file.write("".join(json.dumps(row) + "\n" for row in rows).encode())
        return rows

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def total(second: int, parts: Mapping[int, dict[str, Any]]) -> dict[str, Any]:
    """One cluster second: the workers' deltas added (counts, histograms, sessions, CPU)."""
    counts: Counter[str] = Counter()
    histograms = HistogramSet()
    workers = {}
    for index in sorted(parts):
        delta = parts[index]
        counts.update(delta["counts"])
        own = HistogramSet.decode(delta["histograms"])
        histograms.merge(own)
        workers[str(index)] = {
            "counts": delta["counts"],
            "figures": figure_counts(own),
            "active": delta["active"],
            "cpu_percent": delta["cpu_percent"],
        }
    lag = histograms.get(SEND_LAG)
    ttfa = histograms.get("ttfa_ms")
    return {
        "second": second,
        "counts": {name: counts[name] for name in COUNTS},
        "active": sum(w["active"] for w in workers.values()),
        "cpu_percent": round(sum(w["cpu_percent"] for w in workers.values()), 1),
        "send_lag_p99_ms": None if lag is None or not lag.count else lag.percentile(99),
        "ttfa_p99_ms": None if ttfa is None or not ttfa.count else ttfa.percentile(99),
        "histograms": histograms.encode(),
        "workers": workers,
    }
