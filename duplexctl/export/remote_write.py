"""``--prometheus-rw URL``: the run's figures pushed by Prometheus remote write, off the pacing path.

Why protobuf + cramjam and not OpenTelemetry's remote-write exporter (measured:
``bench/remote_write_wire.py``, BENCHMARKS.md): the exporter
(``opentelemetry-exporter-prometheus-remote-write``, still a 0.x beta) turns OpenTelemetry
histograms into *classic* ``_bucket`` series only — it writes no native histograms — and
needs the OpenTelemetry SDK's metric pipeline, ``requests`` and ``python-snappy`` beside
protobuf; our figures already are mergeable HDR histograms, which become native histograms
directly (:mod:`~.native`). So the message is protobuf's (:mod:`~.prompb`, the upb runtime)
and the compression cramjam's snappy (Rust, wheels for every platform, no system
libsnappy: python-snappy 0.7 itself is now a wrapper of it).

How a push never stalls or fails the run:

* **Off the pacing path.** The event loop only hands a :class:`Batch` (states already
  taken: :mod:`~.state`) to a bounded queue (:data:`QUEUE_MAX`); one daemon thread encodes,
  compresses and sends. When the receiver is slower than the pushes, the oldest waiting
  batch is dropped (states are cumulative: the next batch carries what it had).
* **Bounded.** Every request has a timeout (:attr:`Pusher.timeout_s`: the interval, between
  1 and 5 s); the end of a run waits for its last push at most that long plus a second.
* **Dropped and counted, said once.** A push that fails (refused, timed out, an HTTP error)
  is dropped, counted by reason, and the first one prints one line; report.json's
  ``prometheus_remote_write`` has the counts. Nothing is retried: the next push is newer.
* **Rates from the first sample.** A counter or histogram that first appears with samples
  already counted (the first turn, the first ``no_response``) also gets a zero at the last
  push the receiver took (the run's start before the first): it was zero then, and without
  that point PromQL's ``rate`` and ``increase`` would miss everything it counted up to its
  first push.
* **Native histograms where the receiver takes them.** A receiver that refuses them (a
  Prometheus without ``--enable-feature=native-histograms`` answers "native histograms are
  disabled") gets the same push again with the latency figures as percentiles, and every
  later one too (said in one line); ``--prometheus-rw-histograms percentiles`` asks for
  that from the start (receivers that drop native histograms silently).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from duplexctl import __version__
from duplexctl.export import names, native, prompb
from duplexctl.export.options import NATIVE, PERCENTILES, Endpoint
from duplexctl.export.state import ExportState, Labels, total

QUEUE_MAX: Final = 4
MIN_TIMEOUT_S: Final = 1.0
MAX_TIMEOUT_S: Final = 5.0
#: the first bytes of an error answer kept for the message
MAX_ANSWER_BYTES: Final = 4096


def _warn(line: str) -> None:
    print(f"duplexctl: {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Batch:
    """What one push sends: each source's latest state with its node (None off Ray), and
    the labels every series of the push gets besides the run's (a capacity step's level)."""

    sources: dict[int, tuple[str | None, ExportState]]
    labels: Labels = ()
    final: bool = False


@dataclass(slots=True)
class Stats:
    """What the pushes did (report.json ``prometheus_remote_write``)."""

    pushes: int = 0
    sent: int = 0
    dropped: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    series: int = 0  # in the last push sent
    bytes: int = 0  # compressed, of the last push sent
    cpu_s: float = 0.0  # the push thread's own CPU time (what pushing cost the process)


class Pusher:
    """The push thread (see the module docstring); ``labels`` go on every series."""

    def __init__(
        self,
        url: str,
        labels: Labels,
        *,
        interval_s: float,
        histograms: str = NATIVE,
        warn: Callable[[str], None] = _warn,
    ) -> None:
        self.endpoint = Endpoint(url)
        self.labels = labels
        self.interval_s = interval_s
        self.mode = histograms
        self.timeout_s = min(max(interval_s, MIN_TIMEOUT_S), MAX_TIMEOUT_S)
        self.stats = Stats()
        self.fallback: str | None = None  # why native histograms were given up
        self._warn = warn
        self._queue: queue.Queue[Batch] = queue.Queue(QUEUE_MAX)
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._said = False
        self._last_ms = 0
        #: counters and histograms the receiver has taken a sample of, and when it last took
        #: a push (the run's start before the first): where a new series gets its zero
        self._known: set[tuple[tuple[str, str], ...]] = set()
        self._last_ok_ms = int(time.time() * 1000)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._thread = threading.Thread(target=self._run, name="prometheus-rw", daemon=True)

    def start(self) -> Pusher:
        self._thread.start()
        return self

    # -- the event loop's side: never blocks ------------------------------------------------

    def offer(self, batch: Batch) -> None:
        """Queue ``batch``; the oldest waiting one is dropped when the queue is full."""
        with self._lock:
            self._idle.clear()
            while True:
                try:
                    self._queue.put_nowait(batch)
                    return
                except queue.Full:
                    try:
                        self._queue.get_nowait()
                    except queue.Empty:
                        continue
                    self._dropped("the receiver is slower than the pushes (queue full)")

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait (a thread's call, not the loop's) until every queued push is done, at most
        ``timeout_s`` (default: one request timeout and a second); False if it was not."""
        bound = self.timeout_s + 1.0 if timeout_s is None else timeout_s
        return self._idle.wait(bound)

    def stop(self) -> None:
        """Stop the thread; whatever is still queued is dropped and counted."""
        self._stop.set()
        self._thread.join(self.timeout_s + 1.0)
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
            self._dropped("the run ended before it was sent")

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self.stats.cpu_s = time.thread_time()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self._queue.get(timeout=0.5)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._idle.set()
                continue
            try:
                self._push(batch)
            except Exception as exc:  # never let the thread die: a bug drops one push
                self._dropped(f"{type(exc).__name__}: {exc}")
            with self._lock:
                if self._queue.empty():
                    self._idle.set()

    def _timestamp(self) -> int:
        """Now in ms since the epoch, strictly after the previous push's (a series' samples
        must be in order)."""
        now = int(time.time() * 1000)
        self._last_ms = max(now, self._last_ms + 1)
        return self._last_ms

    def _push(self, batch: Batch) -> None:
        self.stats.pushes += 1
        at = self._timestamp()
        zeros = Zeros(self._known, self._last_ok_ms)
        body, series = encode(batch, self.labels, self.mode, at, self.stats, zeros)
        answer = self._send(body)
        if answer is not None and self.mode == NATIVE and refuses_native(answer):
            self.mode = PERCENTILES
            self.fallback = answer
            self._warn(
                f"note: --prometheus-rw {self.endpoint.url} takes no native histograms "
                f"({answer}): latency figures are pushed as percentiles from now on"
            )
            zeros = Zeros(self._known, self._last_ok_ms)
            body, series = encode(batch, self.labels, self.mode, at, self.stats, zeros)
            answer = self._send(body)
        if answer is None:
            self.stats.sent += 1
            self.stats.series, self.stats.bytes = series, len(body)
            self._known |= zeros.added
            self._last_ok_ms = at
        else:
            self._dropped(answer)

    def _send(self, body: bytes) -> str | None:
        """POST ``body``; None when the receiver took it, else why not (one line)."""
        request = urllib.request.Request(
            self.endpoint.url,
            data=body,
            method="POST",
            headers={
                "Content-Encoding": "snappy",
                "Content-Type": "application/x-protobuf",
                "X-Prometheus-Remote-Write-Version": "0.1.0",
                "User-Agent": f"duplexctl/{__version__}",
                **self.endpoint.headers,
            },
        )
        try:
            with self._opener.open(request, timeout=self.timeout_s) as resp:
                resp.read(MAX_ANSWER_BYTES)
            return None
        except urllib.error.HTTPError as exc:
            text = exc.read(MAX_ANSWER_BYTES).decode("utf-8", "replace").strip()
            first = text.splitlines()[0] if text else exc.reason
            return f"HTTP {exc.code}: {first}"
        except (TimeoutError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError) or "timed out" in str(reason):
                return f"no answer within {self.timeout_s:g} s"
            return f"{type(reason).__name__}: {reason}"

    def _dropped(self, why: str) -> None:
        self.stats.dropped += 1
        self.stats.reasons[why] += 1
        if not self._said:
            self._said = True
            self._warn(
                f"warning: --prometheus-rw {self.endpoint.url}: a push was dropped ({why}); "
                "the run goes on, later drops are only counted (report.json "
                "prometheus_remote_write)"
            )

    def summary(self) -> dict[str, Any]:
        s = self.stats
        return {
            "url": self.endpoint.url,
            "labels": dict(self.labels),
            "interval_s": self.interval_s,
            "histograms": self.mode,
            "native_refused": self.fallback,
            "pushes": s.pushes,
            "sent": s.sent,
            "dropped": s.dropped,
            "drop_reasons": dict(s.reasons),
            "last_push_series": s.series,
            "last_push_bytes": s.bytes,
            "thread_cpu_s": round(s.cpu_s, 4),
        }


def refuses_native(answer: str) -> bool:
    """Whether an error answer says the receiver takes no native histograms."""
    text = answer.lower()
    return "native histogram" in text or ("histogram" in text and "disabled" in text)


# -- encoding --------------------------------------------------------------------------------


@dataclass(slots=True)
class Zeros:
    """Which counters and histograms get a zero first (see the module docstring): those not
    in ``known``, at ``at_ms``; ``added`` collects the ones a push carries."""

    known: set[tuple[tuple[str, str], ...]]
    at_ms: int
    added: set[tuple[tuple[str, str], ...]] = field(default_factory=set)

    def first(self, key: tuple[tuple[str, str], ...]) -> bool:
        """Whether ``key`` is new (its zero goes first); remembered either way."""
        self.added.add(key)
        return key not in self.known


def encode(
    batch: Batch,
    labels: Labels,
    mode: str,
    at_ms: int,
    stats: Stats | None = None,
    zeros: Zeros | None = None,
) -> tuple[bytes, int]:
    """The snappy-compressed ``WriteRequest`` of ``batch`` at ``at_ms``; (body, series)."""
    import cramjam

    request = write_request(batch, labels, mode, at_ms, stats, zeros)
    raw = request.SerializeToString()
    return bytes(cramjam.snappy.compress_raw(raw)), len(request.timeseries)


def write_request(
    batch: Batch,
    labels: Labels,
    mode: str,
    at_ms: int,
    stats: Stats | None = None,
    zeros: Zeros | None = None,
) -> Any:
    """The ``WriteRequest`` message of ``batch`` (see :func:`encode`); counters and
    histograms new to ``zeros`` get a zero sample first."""
    m = prompb.messages()
    request = m["WriteRequest"]()
    used: set[str] = set()
    base = dict(labels) | dict(batch.labels)

    def series(name: str, extra: Iterable[tuple[str, str]]) -> tuple[Any, bool]:
        ts = request.timeseries.add()
        key = tuple(sorted({**base, **dict(extra), "__name__": name}.items()))
        for label, val in key:
            ts.labels.add(name=label, value=val)
        cumulative = name.endswith(("_total", "_count", "_sum")) or name in histogram_names
        return ts, zeros is not None and cumulative and zeros.first(key)

    def add(name: str, extra: Iterable[tuple[str, str]], value: float) -> None:
        ts, new = series(name, extra)
        if new and value != 0:
            assert zeros is not None
            ts.samples.add(value=0.0, timestamp=zeros.at_ms)
        ts.samples.add(value=value, timestamp=at_ms)

    histogram_names = (
        {names.HISTOGRAMS[f].name for f in names.HISTOGRAMS} if mode == NATIVE else set()
    )

    by_node: dict[str | None, list[ExportState]] = {}
    for node, state in batch.sources.values():
        by_node.setdefault(node, []).append(state)
    for node, states in sorted(by_node.items(), key=lambda kv: kv[0] or ""):
        state = total(states)
        where = (("node", node),) if node is not None else ()
        for (name, extra), value in sorted(state.counters.items()):
            add(name, (*where, *extra), value)
            used.add(name)
        for (name, extra), value in sorted(state.gauges.items()):
            add(name, (*where, *extra), value)
            used.add(name)
        for (figure, extra), hist in sorted(state.histograms.items()):
            family = names.histogram_of(figure)
            assert family is not None
            used.add(family.name)
            if mode == NATIVE:
                ts, new = series(family.name, (*where, *extra))
                if new and hist.count:
                    assert zeros is not None
                    _fill(ts.histograms.add(), native.EMPTY, zeros.at_ms)
                _fill(ts.histograms.add(), native.native(hist, family.to_base), at_ms)
                continue
            for q, value in native.percentiles(hist, family.to_base).items():
                add(family.name, (*where, *extra, ("quantile", f"{q:g}")), value)
            add(family.name + "_count", (*where, *extra), float(hist.count))
            add(family.name + "_sum", (*where, *extra), native.summed(hist, family.to_base))
    add(names.RUN_INFO.name, (("version", __version__),), 1.0)
    used.add(names.RUN_INFO.name)
    level = dict(batch.labels).get("level")
    if level is not None:
        add(names.CAPACITY_LEVEL.name, (), float(level))
        used.add(names.CAPACITY_LEVEL.name)
    if stats is not None:
        add(names.PUSHES.name, (("result", "sent"),), float(stats.sent))
        add(names.PUSHES.name, (("result", "dropped"),), float(stats.dropped))
        used.add(names.PUSHES.name)
    for name in sorted(used):
        _metadata(request.metadata.add(), names.FAMILIES[name], mode)
    return request


def _fill(h: Any, n: native.NativeHistogram, at_ms: int) -> None:
    h.count_int = n.count
    h.sum = n.sum
    h.schema = n.schema
    h.zero_threshold = n.zero_threshold
    h.zero_count_int = n.zero_count
    for offset, length in n.positive_spans:
        h.positive_spans.add(offset=offset, length=length)
    h.positive_deltas.extend(n.positive_deltas)
    for offset, length in n.negative_spans:
        h.negative_spans.add(offset=offset, length=length)
    h.negative_deltas.extend(n.negative_deltas)
    h.timestamp = at_ms


_TYPES: Final = {
    "counter": prompb.COUNTER,
    "gauge": prompb.GAUGE,
    "histogram": prompb.HISTOGRAM,
}


def _metadata(meta: Any, family: names.Family, mode: str) -> None:
    kind = _TYPES[family.kind]
    if family.kind == "histogram" and mode == PERCENTILES:
        kind = prompb.SUMMARY
    meta.type = kind
    meta.metric_family_name = family.name
    meta.help = family.help
    meta.unit = family.unit
