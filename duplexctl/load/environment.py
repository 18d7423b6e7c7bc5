"""What a load report pins about where it ran (docs/report.md "The pinned environment").

A latency figure means little without what produced it: the client (duplexctl's version and
the command line), the machine it ran on (its CPU count, and its load average when the run
began and ended — a busy host shows in send lag, but not always), and the server (its
``GET /v1/models`` answer: which model, owned by whom, how long a context; and the
``*_info`` families of its ``/metrics``: build and configuration labels vLLM exposes as
gauges). Each part that could not be had says why instead of being left out.
"""

from __future__ import annotations

import json
import os
import platform
import ssl
import sys
import urllib.error
import urllib.request
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from duplexctl import __version__
from duplexctl.prometheus.store import Store

#: the /v1/models fetch: bounded, off the pacing path (it runs before the first session)
FETCH_TIMEOUT_S: Final = 5.0
MAX_BODY_BYTES: Final = 256 * 1024
_SCHEMES: Final = {"ws": "http", "wss": "https", "http": "http", "https": "https"}


def host() -> dict[str, Any]:
    """The client machine now: CPU count and the 1 / 5 / 15 minute load averages."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not every platform has it
        load = None
    return {"cpu_count": os.cpu_count(), "load_avg": load}


def client(command: str) -> dict[str, Any]:
    """duplexctl's version, the command line, Python and the platform."""
    return {
        "duplexctl": __version__,
        "command": command,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "executable": os.path.basename(sys.executable),
    }


def models_url(duplex_url: str) -> str:
    """The server's ``/v1/models``: the duplex URL's host and port (``ws→http``)."""
    parts = urlsplit(duplex_url)
    scheme = _SCHEMES.get(parts.scheme.lower(), "http")
    return urlunsplit((scheme, parts.netloc, "/v1/models", "", ""))


def models(
    duplex_url: str, *, api_key: str | None = None, ssl_context: ssl.SSLContext | None = None
) -> dict[str, Any]:
    """``GET /v1/models`` as the server answered it, or ``{"url", "error"}`` saying why not
    (the run goes on: a server without the route is still a server)."""
    url = models_url(duplex_url)
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, headers=headers)
    context = ssl_context if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S, context=context) as resp:
            body = resp.read(MAX_BODY_BYTES + 1)
        if len(body) > MAX_BODY_BYTES:
            return {"url": url, "error": f"the answer is larger than {MAX_BODY_BYTES} bytes"}
        answer = json.loads(body)
    except urllib.error.HTTPError as exc:
        return {"url": url, "error": f"HTTP {exc.code} {exc.reason}"}
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return {"url": url, "error": f"{type(reason).__name__}: {reason}"}
    return {"url": url, "answer": answer}


def info_metrics(store: Store | None, *, scraped: bool) -> dict[str, Any]:
    """The ``*_info`` families the server's ``/metrics`` exposed (their labels carry build
    and configuration), each series with its labels and latest value."""
    if store is None:
        return {
            "families": [],
            "note": "not scraped" if not scraped else "no scrape answered",
        }
    out: list[dict[str, Any]] = []
    for key, family, _times, values in store.series():
        if not family.endswith("_info") or not values:
            continue
        labels = dict(key[2])
        out.append({"endpoint": key[0], "name": key[1], "labels": labels, "value": values[-1]})
    out.sort(key=lambda r: (r["endpoint"], r["name"], sorted(r["labels"].items())))
    return {"families": out, "note": "" if out else "the server exposes no *_info family"}
