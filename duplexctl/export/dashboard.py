"""The Grafana dashboard (``dashboard.json``, package data): the client's pushed figures beside
vLLM's and vLLM-Omni's server families.

Panels: sessions, attempts and turns per second, ttfa / ttft / turn / stop latency / send lag
percentiles (from the native histograms; in ``percentiles`` mode, the pushed quantiles),
errors, drops and resumes, audio throughput, the pushes themselves; the client's ttfa p99
beside ``vllm:num_requests_running``; vLLM's running and waiting requests, KV-cache usage,
TTFT, end-to-end and queue time; vLLM-Omni's requests and audio TTFP; duplex admission. Its
variables: the Prometheus data source, ``run_id``, ``node`` (``--ray``) and ``server`` (the
scraped ``instance``). ``tests/test_export_prometheus.py`` runs every query against a real
Prometheus holding a load's pushes and ``duplexctl serve``'s scraped ``/metrics``.

    python -m duplexctl.export.dashboard > duplexctl-dashboard.json   # then Grafana: Import
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from importlib import resources
from typing import Any

FILE = "dashboard.json"


def text() -> str:
    """The dashboard's JSON, as shipped."""
    return resources.files("duplexctl.export").joinpath(FILE).read_text(encoding="utf-8")


def load() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(text())
    return document


def panels(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel but rows, nested ones included."""
    for panel in document.get("panels", []):
        if panel.get("type") == "row":
            yield from (p for p in panel.get("panels", []) if p.get("type") != "row")
        else:
            yield panel


def queries(document: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(panel title, refId, PromQL expression) of every panel target."""
    for panel in panels(document):
        for target in panel.get("targets", []):
            yield panel["title"], target["refId"], target["expr"]


def main() -> None:
    sys.stdout.write(text())


if __name__ == "__main__":
    main()
