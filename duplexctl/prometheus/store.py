"""Every scraped sample, on the run's clock: kept in memory for the summaries and written to
``server_metrics.jsonl`` as it arrives (so it survives Ctrl-C), read back by ``duplexctl
report``.

The file's lines (docs/metrics.md "server_metrics.jsonl"), each a JSON object with ``kind``:

* ``header``: ``clock`` (what ``t`` means), ``interval_s``, ``endpoints``;
* ``family``: ``endpoint``, ``name``, ``type``, ``help`` — once per endpoint and family;
* ``sample``: ``t`` (seconds on the run's clock), ``endpoint``, ``name`` (the series name as
  exposed: ``…_bucket``, ``…_total`` …), ``labels``, ``value``;
* ``scrape``: ``t``, ``endpoint``, ``ok``, ``ms`` (how long the scrape took), ``error`` when
  it failed;
* ``window``: ``label`` (a capacity step: ``"12"``), ``t0``, ``t1``.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from duplexctl.prometheus.exposition import PROCESS_PREFIXES, Family
from duplexctl.rundir import JsonLines, Writes

FILE_NAME: Final = "server_metrics.jsonl"
CLOCK: Final = "seconds since the run started (the clock of the report's slices)"

SeriesKey = tuple[str, str, tuple[tuple[str, str], ...]]  # endpoint, series name, labels


@dataclass(slots=True)
class FamilyInfo:
    endpoint: str
    name: str
    type: str
    help: str


@dataclass(slots=True)
class Store:
    """Samples by series, families by endpoint and name, windows by label; thread-safe
    appends (the scraper thread writes, the event loop reads the latest values)."""

    families: dict[tuple[str, str], FamilyInfo] = field(default_factory=dict)
    #: series → family name (``vllm:x_bucket`` → ``vllm:x``)
    family_of: dict[SeriesKey, str] = field(default_factory=dict)
    #: doubles in arrays, not lists of float objects: 16 bytes a sample instead of ~64 (a
    #: real vLLM exposes ~800 series: 100 ms scrapes for 10 minutes are 4.8 M samples)
    times: dict[SeriesKey, array[float]] = field(default_factory=dict)
    values: dict[SeriesKey, array[float]] = field(default_factory=dict)
    windows: list[tuple[str, float, float]] = field(default_factory=list)
    scrapes: dict[str, list[int]] = field(default_factory=dict)  # endpoint → [ok, failed]
    #: the file's header line (``interval_s``, ``endpoints``), when read from one
    header: dict[str, Any] = field(default_factory=dict)
    #: the first failure of each endpoint, when read from a file
    errors: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_scrape(
        self, t: float, endpoint: str, families: Iterable[Family]
    ) -> list[dict[str, Any]]:
        """Keep one scrape's samples; returns the lines to write (families new to the file)."""
        lines: list[dict[str, Any]] = []
        with self._lock:
            for fam in families:
                if fam.name.startswith(PROCESS_PREFIXES):
                    continue
                key = (endpoint, fam.name)
                if key not in self.families:
                    self.families[key] = FamilyInfo(endpoint, fam.name, fam.type, fam.help)
                    lines.append(
                        {
                            "kind": "family",
                            "endpoint": endpoint,
                            "name": fam.name,
                            "type": fam.type,
                            "help": fam.help,
                        }
                    )
                for s in fam.samples:
                    series: SeriesKey = (endpoint, s.name, tuple(sorted(s.labels.items())))
                    self.family_of.setdefault(series, fam.name)
                    self.times.setdefault(series, array("d")).append(t)
                    self.values.setdefault(series, array("d")).append(s.value)
                    lines.append(
                        {
                            "kind": "sample",
                            "t": round(t, 4),
                            "endpoint": endpoint,
                            "name": s.name,
                            "labels": s.labels,
                            "value": s.value,
                        }
                    )
            self.scrapes.setdefault(endpoint, [0, 0])[0] += 1
        return lines

    def add_failure(self, endpoint: str) -> None:
        with self._lock:
            self.scrapes.setdefault(endpoint, [0, 0])[1] += 1

    def latest(self, name: str) -> list[float]:
        """The last value of every series called ``name`` (all endpoints and labels)."""
        with self._lock:
            return [v[-1] for k, v in self.values.items() if k[1] == name and v]

    def series(self) -> Iterator[tuple[SeriesKey, str, array[float], array[float]]]:
        """(key, family name, times, values) of every series."""
        for key, times in self.times.items():
            yield key, self.family_of[key], times, self.values[key]

    def family(self, endpoint: str, name: str) -> FamilyInfo | None:
        return self.families.get((endpoint, name))

    @classmethod
    def read(cls, path: Path) -> Store:
        """A store from a ``server_metrics.jsonl`` (``duplexctl report``); bad lines skipped."""
        store = cls()
        with path.open("rb") as fh:
            for raw in fh:
                try:
                    line = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue  # a line cut by a kill mid-write
                if not isinstance(line, dict):
                    continue
                kind = line.get("kind")
                if kind == "family":
                    key = (str(line["endpoint"]), str(line["name"]))
                    store.families[key] = FamilyInfo(
                        key[0], key[1], str(line.get("type", "")), str(line.get("help", ""))
                    )
                elif kind == "sample":
                    endpoint, name = str(line["endpoint"]), str(line["name"])
                    labels = tuple(sorted((str(k), str(v)) for k, v in line["labels"].items()))
                    series: SeriesKey = (endpoint, name, labels)
                    if series not in store.family_of:
                        store.family_of[series] = _family_name(store, endpoint, name)
                    store.times.setdefault(series, array("d")).append(float(line["t"]))
                    store.values.setdefault(series, array("d")).append(float(line["value"]))
                elif kind == "window":
                    store.windows.append((str(line["label"]), float(line["t0"]), float(line["t1"])))
                elif kind == "scrape":
                    endpoint = str(line["endpoint"])
                    counts = store.scrapes.setdefault(endpoint, [0, 0])
                    counts[0 if line.get("ok") else 1] += 1
                    if not line.get("ok"):
                        store.errors.setdefault(endpoint, str(line.get("error", "")))
                elif kind == "header":
                    store.header = line
        return store


def _family_name(store: Store, endpoint: str, series: str) -> str:
    """The family a series belongs to: itself, or itself minus a known suffix."""
    if (endpoint, series) in store.families:
        return series
    for suffix in ("_bucket", "_count", "_sum", "_total", "_created", "_gcount", "_gsum"):
        base = series.removesuffix(suffix)
        if base != series and (endpoint, base) in store.families:
            return base
    return series


class JsonlWriter:
    """``server_metrics.jsonl``, one line per record, each scrape's lines written whole or
    not at all (``rundir.JsonLines``); a write that fails goes to the run's ``writes`` (which
    stops the run) and nothing more is written — the scrapes go on in memory."""

    def __init__(self, path: Path, writes: Writes | None = None) -> None:
        self.path = path
        self.writes = writes if writes is not None else Writes()
        self._file = JsonLines(path, self.writes, append=True)
        self._lock = threading.Lock()
        self._closed = False

    def write(self, lines: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            if self._closed:
                return
            self._file.write(b"".join(orjson.dumps(line) + b"\n" for line in lines))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._file.close()
