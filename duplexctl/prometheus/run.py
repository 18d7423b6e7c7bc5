"""One command's scraping: started when the server is known, stopped when the run ends, and
turned into report.json's ``server_metrics`` section.

``load``, ``replay`` and ``probe`` call :func:`scraping` around their run; the live view
asks :func:`live_line` for its server line (the scraper of the run in progress, if any).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from duplexctl.prometheus.endpoints import ScrapeOptions
from duplexctl.prometheus.scraper import Scraper
from duplexctl.prometheus.summary import dashboard_line, explain_knee, summarise
from duplexctl.rundir import Writes

_active: Scraper | None = None


@contextlib.asynccontextmanager
async def scraping(
    options: ScrapeOptions | None,
    duplex_url: str,
    *,
    api_key: str | None = None,
    out: Path | None = None,
    ssl_context: ssl.SSLContext | None = None,
    origin: float | None = None,
    writes: Writes | None = None,
) -> AsyncIterator[Scraper | None]:
    """Scrape for as long as the block runs; None when scraping is off. The caller calls
    :meth:`Scraper.release_held` once it knows its run reached the server. Stopping joins the
    threads and scrapes a last time off the event loop: the server may be the embedded one,
    answering on this very loop."""
    global _active
    endpoints = options.endpoints(duplex_url, api_key) if options is not None else ()
    if not endpoints:
        yield None
        return
    assert options is not None
    https = any(e.url.startswith("https:") for e in endpoints)
    scraper = Scraper(
        endpoints,
        options.interval_s,
        origin=time.monotonic() if origin is None else origin,
        out=out,
        ssl_context=ssl_context if https else None,
        writes=writes,
    )
    scraper.start()
    await asyncio.to_thread(scraper.wait_first)  # the counters' baseline precedes the run
    _active = scraper
    try:
        yield scraper
    except BaseException:
        _active = None
        await asyncio.to_thread(scraper.stop, final=False)
        raise  # the run failed (its server unreachable …): its own line says so
    _active = None
    await asyncio.to_thread(scraper.stop)


def live_line() -> str | None:
    """The dashboard's server line while a run scrapes, else None."""
    scraper = _active
    if scraper is None:
        return None
    return dashboard_line(scraper.store, len(scraper.endpoints))


def section(
    scraper: Scraper,
    *,
    slices: Sequence[tuple[float, float]] = (),
    capacity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """report.json's ``server_metrics`` (docs/metrics.md), with the knee of a capacity
    search when ``capacity`` (its ``capacity_search`` section) is given."""
    out = summarise(
        scraper.store,
        endpoints=[e.to_dict() for e in scraper.endpoints],
        interval_s=scraper.interval_s,
        slices=slices,
        warnings=scraper.warnings,
    )
    if capacity is not None:
        out["knee"] = explain_knee(
            out, capacity.get("largest_pass"), capacity.get("first_fail"), capacity["unit"]
        )
    return out


def slices_of(report: dict[str, Any]) -> list[tuple[float, float]]:
    """The (start, end) of each time slice of a report, on the run's clock."""
    return [(float(s["start_s"]), float(s["end_s"])) for s in report.get("slices", [])]
