"""Which ``/metrics`` endpoints a run scrapes, decided once from ``--url`` and the flags.

The default endpoint is the duplex server's own host and port (``ws://`` → ``http://``,
``wss://`` → ``https://``, path ``/metrics``), with the same ``Authorization`` header the
duplex connection sends: vLLM serves ``/metrics`` beside its API on one port. Endpoints given
with ``--server-metrics`` (a DCGM exporter, a node exporter, a router) are other services:
they get no API key, because the key is the duplex server's credential, not theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal
from urllib.parse import urlsplit, urlunsplit

from duplexctl.errors import BadInput

DEFAULT_INTERVAL_S: Final = 1.0
#: The scrape interval's bounds: below 50 ms a scrape costs more than it tells; above 60 s a
#: capacity step would see one sample.
MIN_INTERVAL_S: Final = 0.05
MAX_INTERVAL_S: Final = 60.0

_SCHEMES: Final = {"ws": "http", "wss": "https", "http": "http", "https": "https"}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One ``/metrics`` URL and the headers it is fetched with (never printed: the key)."""

    url: str
    origin: Literal["default", "flag"]
    headers: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, str]:
        return {"url": self.url, "origin": self.origin}


def default_endpoint(duplex_url: str, api_key: str | None = None) -> Endpoint:
    """The duplex server's own ``/metrics`` (``ws→http``, ``wss→https``, same host and port)."""
    parts = urlsplit(duplex_url)
    scheme = _SCHEMES.get(parts.scheme.lower(), "http")
    url = urlunsplit((scheme, parts.netloc, "/metrics", "", ""))
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return Endpoint(url, "default", headers)


def parse_endpoint(typed: str) -> Endpoint:
    """A ``--server-metrics`` URL: http(s) with a host; no path means ``/metrics``."""
    text = typed.strip()
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or " " in text:
        raise BadInput(
            f"--server-metrics {typed!r}: not an http:// or https:// URL with a host "
            "(e.g. http://127.0.0.1:9400/metrics)"
        )
    try:
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        raise BadInput(f"--server-metrics {typed!r}: bad port") from None
    path = parts.path or "/metrics"
    return Endpoint(urlunsplit((parts.scheme.lower(), parts.netloc, path, parts.query, "")), "flag")


def check_interval(value: float | None) -> float:
    """``--scrape-interval`` in seconds (default 1 s), within its bounds, else exit 2."""
    if value is None:
        return DEFAULT_INTERVAL_S
    if not MIN_INTERVAL_S <= value <= MAX_INTERVAL_S:
        raise BadInput(
            f"--scrape-interval {value:g}: must be between {MIN_INTERVAL_S:g} and "
            f"{MAX_INTERVAL_S:g} seconds"
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class ScrapeOptions:
    """``--server-metrics`` / ``--no-server-metrics`` / ``--scrape-interval``, checked at the
    command line (exit 2 before any socket); the endpoints follow once the server is known."""

    extra: tuple[Endpoint, ...] = ()
    enabled: bool = True
    interval_s: float = DEFAULT_INTERVAL_S

    def endpoints(self, duplex_url: str, api_key: str | None = None) -> tuple[Endpoint, ...]:
        """The default endpoint of ``duplex_url`` first, then the flagged ones; none when off."""
        if not self.enabled:
            return ()
        found = [default_endpoint(duplex_url, api_key)]
        found.extend(e for e in self.extra if e.url != found[0].url)
        return tuple(found)

    def echo(self) -> dict[str, object]:
        """For report.json's ``config`` (no headers: they may hold the API key)."""
        return {
            "server_metrics": "off" if not self.enabled else [e.url for e in self.extra],
            "scrape_interval_s": self.interval_s,
        }


def resolve(
    extra: list[str] | None, *, enabled: bool | None = True, interval_s: float | None = None
) -> ScrapeOptions:
    """The scrape options of a command, each value checked (``BadInput``: exit 2)."""
    return ScrapeOptions(
        extra=tuple(parse_endpoint(u) for u in extra or []),
        enabled=enabled is not False,
        interval_s=check_interval(interval_s),
    )
