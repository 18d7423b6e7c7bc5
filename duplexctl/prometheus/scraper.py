"""The scraper: one thread per endpoint, off the pacing path.

Why threads and not a task on the event loop: the loop paces audio for hundreds of sessions;
an HTTP fetch, and above all parsing a ~100 kB exposition, would hold it for milliseconds at
a time and show up as send lag. A thread does its I/O without the loop and yields the GIL
while it waits; each endpoint has its own thread, so a slow one never delays another. Every
fetch has a bounded timeout (the interval, between 1 and 5 s) and every thread stops within
that bound once :meth:`Scraper.stop` is called (daemon threads: nothing outlives the command).

Failures never stop a run: the first failure of an endpoint prints one warning line
(``duplexctl: warning: server metrics: URL: why``); later ones are only counted. An endpoint
that answers 404 has no ``/metrics``: it is said once and not asked again. The default
endpoint's *connection* failures are held back until :meth:`Scraper.release_held`: when the
duplex server itself cannot be reached, the command says so in its own one line, and a
second line about its ``/metrics`` would only repeat it.
"""

from __future__ import annotations

import http.client
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from duplexctl.prometheus.endpoints import Endpoint
from duplexctl.prometheus.exposition import ACCEPT, NotMetrics, parse
from duplexctl.prometheus.store import CLOCK, FILE_NAME, JsonlWriter, Store
from duplexctl.rundir import Writes

MAX_BODY_BYTES: Final = 32 * 1024 * 1024
MIN_TIMEOUT_S: Final = 1.0
MAX_TIMEOUT_S: Final = 5.0


def _warn(line: str) -> None:
    print(f"duplexctl: warning: server metrics: {line}", file=sys.stderr, flush=True)


class Scraper:
    """Scrape ``endpoints`` every ``interval_s`` from :meth:`start` to :meth:`stop`, onto
    ``store`` and (with ``out``) ``server_metrics.jsonl``; ``origin`` is the run's clock."""

    def __init__(
        self,
        endpoints: tuple[Endpoint, ...],
        interval_s: float,
        *,
        origin: float | None = None,
        out: Path | None = None,
        ssl_context: ssl.SSLContext | None = None,
        warn: Callable[[str], None] = _warn,
        writes: Writes | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.interval_s = interval_s
        self.origin = time.monotonic() if origin is None else origin
        self.store = Store()
        self.warnings: dict[str, str] = {}
        self._ssl = ssl_context
        self._warn = warn
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._gave_up: set[str] = set()
        self._held: list[str] = []
        self._first: list[threading.Event] = []
        self._writer = JsonlWriter(out / FILE_NAME, writes) if out is not None else None
        self.timeout_s = min(max(interval_s, MIN_TIMEOUT_S), MAX_TIMEOUT_S)

    def now(self) -> float:
        """Seconds on the run's clock."""
        return time.monotonic() - self.origin

    def start(self) -> Scraper:
        if self._writer is not None:
            self._writer.write(
                [
                    {
                        "kind": "header",
                        "clock": CLOCK,
                        "interval_s": self.interval_s,
                        "endpoints": [e.to_dict() for e in self.endpoints],
                    }
                ]
            )
        for endpoint in self.endpoints:
            first = threading.Event()
            self._first.append(first)
            thread = threading.Thread(
                target=self._run,
                args=(endpoint, first),
                name=f"scrape {endpoint.url}",
                daemon=True,
            )
            self._threads.append(thread)
            thread.start()
        return self

    def wait_first(self) -> None:
        """Block until every endpoint has answered (or failed) once, at most one fetch timeout:
        the baseline of the counters is then taken before the run does anything."""
        deadline = time.monotonic() + self.timeout_s + 0.5
        for first in self._first:
            first.wait(max(0.0, deadline - time.monotonic()))

    def mark(self, label: str, t0: float, t1: float) -> None:
        """Record a window of the run (a capacity step) on the run's clock."""
        self.store.windows.append((label, t0, t1))
        if self._writer is not None:
            self._writer.write(
                [{"kind": "window", "label": label, "t0": round(t0, 4), "t1": round(t1, 4)}]
            )

    def stop(self, *, final: bool = True) -> None:
        """Stop every thread (within one fetch timeout), scrape each endpoint a last time (so
        counter and histogram deltas cover the whole run) and close the file."""
        if self._stop.is_set():
            return
        self._stop.set()
        alive = False
        for thread in self._threads:
            thread.join(self.timeout_s + 1.0)
            alive = alive or thread.is_alive()
        if final and not alive:
            for endpoint in self.endpoints:
                if endpoint.url not in self._gave_up:
                    self.scrape_once(endpoint)
        if self._writer is not None:
            self._writer.close()

    def release_held(self) -> None:
        """Print the warnings held back (the run reached its server: they are news)."""
        for line in self._held:
            self._warn(line)
        self._held.clear()

    def __enter__(self) -> Scraper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- one endpoint ---------------------------------------------------------------------

    def _run(self, endpoint: Endpoint, first: threading.Event) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            keep_going = self.scrape_once(endpoint)
            first.set()
            if not keep_going:
                self._gave_up.add(endpoint.url)
                return
            next_at += self.interval_s
            now = time.monotonic()
            if next_at < now:  # a slow scrape: skip the missed instants, keep the grid
                next_at += ((now - next_at) // self.interval_s + 1) * self.interval_s
            self._stop.wait(next_at - now)

    def scrape_once(self, endpoint: Endpoint) -> bool:
        """One scrape of ``endpoint``; False when it is not worth asking again (404)."""
        t = self.now()
        started = time.monotonic()
        request = urllib.request.Request(
            endpoint.url, headers={"Accept": ACCEPT, **endpoint.headers}
        )
        keep_going = True
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._ssl) as resp:
                body = resp.read(MAX_BODY_BYTES + 1)
                content_type = resp.headers.get("Content-Type", "")
            if len(body) > MAX_BODY_BYTES:
                raise NotMetrics(f"the body is larger than {MAX_BODY_BYTES // 2**20} MiB")
            families = parse(body, content_type)
        except urllib.error.HTTPError as exc:
            keep_going = exc.code != 404
            why = f"HTTP {exc.code} {exc.reason}" + (
                ": the server has no /metrics; not scraped again" if exc.code == 404 else ""
            )
            self._failed(endpoint, t, started, why)
            return keep_going
        except NotMetrics as exc:
            self._failed(endpoint, t, started, str(exc))
            return True
        except (TimeoutError, OSError, ValueError, http.client.HTTPException) as exc:
            # HTTPException: an answer that is not HTTP at all (BadStatusLine …)
            reason = getattr(exc, "reason", exc)
            why = (
                f"no answer within {self.timeout_s:g} s"
                if isinstance(reason, TimeoutError) or "timed out" in str(reason)
                else f"{type(reason).__name__}: {reason}"
            )
            self._failed(endpoint, t, started, why, connection=True)
            return True
        lines = self.store.add_scrape(t, endpoint.url, families)
        lines.append(self._scrape_line(endpoint, t, started, None))
        if self._writer is not None:
            self._writer.write(lines)
        return True

    def _scrape_line(
        self, endpoint: Endpoint, t: float, started: float, error: str | None
    ) -> dict[str, Any]:
        line: dict[str, Any] = {
            "kind": "scrape",
            "t": round(t, 4),
            "endpoint": endpoint.url,
            "ok": error is None,
            "ms": round((time.monotonic() - started) * 1000.0, 3),
        }
        if error is not None:
            line["error"] = error
        return line

    def _failed(
        self, endpoint: Endpoint, t: float, started: float, why: str, *, connection: bool = False
    ) -> None:
        self.store.add_failure(endpoint.url)
        if endpoint.url not in self.warnings:
            self.warnings[endpoint.url] = why
            line = f"{endpoint.url}: {why} (the run goes on)"
            if connection and endpoint.origin == "default":
                self._held.append(line)
            else:
                self._warn(line)
        if self._writer is not None:
            self._writer.write([self._scrape_line(endpoint, t, started, why)])
