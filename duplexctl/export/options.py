"""``--prometheus-rw`` and its two companions, checked once at the command line (exit 2).

A module of its own, importing nothing heavy: ``load``'s config carries it to every worker
(a spawned process, a Ray actor) without importing protobuf where nothing is pushed.
"""

from __future__ import annotations

import base64
import math
import urllib.parse
from dataclasses import dataclass
from typing import Any, Final

from duplexctl.errors import BadInput

NATIVE: Final = "native"
PERCENTILES: Final = "percentiles"
HISTOGRAM_MODES: Final = (NATIVE, PERCENTILES)
DEFAULT_INTERVAL_S: Final = 5.0
#: the workers' states come on their 1 s status ticks: a shorter interval would not be one
MIN_INTERVAL_S: Final = 1.0
MAX_INTERVAL_S: Final = 300.0


@dataclass(frozen=True, slots=True)
class PushOptions:
    """``--prometheus-rw URL``, ``--prometheus-rw-interval S``, ``--prometheus-rw-histograms``,
    checked once at the command line (exit 2); travels to the workers with the run's config."""

    url: str
    interval_s: float = DEFAULT_INTERVAL_S
    histograms: str = NATIVE

    @classmethod
    def resolve(
        cls, url: str | None, interval_s: float | None = None, histograms: str | None = None
    ) -> PushOptions | None:
        if url is None:
            if interval_s is not None or histograms is not None:
                raise BadInput(
                    "--prometheus-rw-interval and --prometheus-rw-histograms need --prometheus-rw URL"
                )
            return None
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname or " " in url.strip():
            raise BadInput(
                f"--prometheus-rw {url!r}: expected an http:// or https:// URL of a remote-write "
                "receiver, e.g. http://prometheus:9090/api/v1/write"
            )
        try:
            parts.port  # noqa: B018  # a bad port raises here
        except ValueError:
            raise BadInput(f"--prometheus-rw {url!r}: the port is not a number") from None
        interval = DEFAULT_INTERVAL_S if interval_s is None else float(interval_s)
        if not (math.isfinite(interval) and MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S):
            raise BadInput(
                f"--prometheus-rw-interval {interval_s!r}: expected seconds from "
                f"{MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g}"
            )
        mode = NATIVE if histograms is None else histograms.strip().lower()
        if mode not in HISTOGRAM_MODES:
            raise BadInput(
                f"--prometheus-rw-histograms {histograms!r}: expected one of "
                + ", ".join(HISTOGRAM_MODES)
            )
        return cls(url.strip(), interval, mode)

    def echo(self) -> dict[str, Any]:
        """For report.json's config: the URL without any credentials in it."""
        return {
            "url": Endpoint(self.url).url,
            "interval_s": self.interval_s,
            "histograms": self.histograms,
        }


class Endpoint:
    """The receiver's URL with any credentials taken out (sent as basic auth, never printed)."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.headers: dict[str, str] = {}
        if parts.username is not None:
            raw = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(raw.encode()).decode()
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = host + (f":{parts.port}" if parts.port is not None else "")
        self.url = urllib.parse.urlunsplit(
            (parts.scheme, netloc, parts.path, parts.query, parts.fragment)
        )
