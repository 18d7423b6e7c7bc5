"""What ``--prometheus-rw`` pushes: every series name, its type, unit and definition, once.

Names follow Prometheus's conventions (the ``duplexctl_`` prefix, base units, ``_seconds``
for times, ``_ratio`` for ratios, ``_total`` for counters) and each carries one figure of
docs/metrics.md, whose table "Remote write" lists them beside their definitions
(``tests/test_docs.py`` checks that every name here is there). A histogram figure
``NAME_ms`` is pushed as ``duplexctl_NAME_seconds`` (values / 1000), a ratio figure (``rtf``,
``rtf_omni``) as ``duplexctl_NAME_ratio``; both as native histograms, or as a summary of
chosen percentiles where the receiver takes no native histograms (:mod:`~.remote_write`).

Labels every series carries: ``job="duplexctl"``, ``command`` (``load``, ``replay``),
``run_id`` (one run's series: :func:`new_run_id`), ``target`` (the duplex URL, without
credentials or query); on ``--ray`` ``node`` (the node the figures were taken on); in a
capacity search ``level`` (the step's offered load); ``load``'s histograms ``phase``
(``warmup``, ``ramp``, ``steady``: the report's headline figures are ``phase!="warmup"``).
"""

from __future__ import annotations

import secrets
import time
import urllib.parse
from dataclasses import dataclass
from typing import Final

from duplexctl.report.histogram import RATIO_METRICS
from duplexctl.report.load_report import origin_of
from duplexctl.report.slo import HISTOGRAM_METRICS_IN_ORDER

PREFIX: Final = "duplexctl_"
JOB: Final = "duplexctl"


@dataclass(frozen=True, slots=True)
class Family:
    """One pushed metric family: its name, Prometheus type, help text and unit."""

    name: str
    kind: str  # counter | gauge | histogram | info
    help: str
    unit: str = ""
    #: the figure of docs/metrics.md it carries (histograms: the figure recorded)
    figure: str = ""
    #: multiply a recorded value by this to get the base unit (ms → s)
    to_base: float = 1.0


def _counter(stem: str, help_: str, figure: str) -> Family:
    return Family(f"{PREFIX}{stem}_total", "counter", help_, figure=figure)


def _gauge(stem: str, help_: str, figure: str) -> Family:
    return Family(f"{PREFIX}{stem}", "gauge", help_, figure=figure)


SESSIONS_ACTIVE: Final = _gauge(
    "sessions_active", "Sessions started and not ended yet (opening or admitted).", "active"
)
SESSIONS_ADMITTED: Final = _gauge(
    "sessions_admitted", "Sessions admitted (session.created) and not ended yet.", "admitted_now"
)
CAPACITY_LEVEL: Final = _gauge(
    "capacity_level", "Offered load of the capacity-search step running now.", "level"
)
RUN_INFO: Final = Family(
    f"{PREFIX}run_info", "gauge", "1 while the run pushes; its version in a label.", figure="run"
)
ATTEMPTS: Final = _counter(
    "attempts", "Session attempts ended, by admission outcome (label outcome).", "admission"
)
TURNS: Final = _counter("turns", "User turns ended, by outcome (label outcome).", "outcome")
ERRORS: Final = _counter("errors", "Errors of the run, by code (label code).", "errors")
DROPS: Final = _counter(
    "drops", "Connections lost that the client did not close (scripted and unplanned).", "drops"
)
UNPLANNED_DROPS: Final = _counter(
    "unplanned_drops", "Drops that no drop step scripted: the server's or the network's.",
    "unplanned_drops",
)  # fmt: skip
RESUMES: Final = _counter("resumes", "Drops answered by session.resumed.", "resumes")
RESUME_FAILURES: Final = _counter(
    "resume_failures", "Drops whose resume failed.", "resume_failures"
)
VIOLATIONS: Final = _counter(
    "violations", "Protocol invariant violations, by invariant (label invariant).", "violations"
)
UNDERRUNS: Final = _counter(
    "underruns", "Audio chunks that arrived after the playback clock needed them.", "underruns"
)
INTERRUPTIONS: Final = _counter("interruptions", "Interruptions attempted.", "interruptions")
INTERRUPTIONS_CANCELLED: Final = _counter(
    "interruptions_cancelled", "Interruptions whose response ended cancelled.",
    "barge_in_success_rate",
)  # fmt: skip
AUDIO_RECEIVED: Final = Family(
    f"{PREFIX}audio_received_seconds_total",
    "counter",
    "Assistant audio received, seconds (its rate is audio_throughput).",
    unit="seconds",
    figure="audio_throughput",
)
PUSHES: Final = _counter(
    "remote_write_pushes", "This run's remote-write pushes, by result (sent, dropped).", "pushes"
)

COUNTERS: Final = (
    ATTEMPTS, TURNS, ERRORS, DROPS, UNPLANNED_DROPS, RESUMES, RESUME_FAILURES, VIOLATIONS,
    UNDERRUNS, INTERRUPTIONS, INTERRUPTIONS_CANCELLED, AUDIO_RECEIVED, PUSHES,
)  # fmt: skip
GAUGES: Final = (SESSIONS_ACTIVE, SESSIONS_ADMITTED, CAPACITY_LEVEL, RUN_INFO)


def _histogram(figure: str) -> Family:
    if figure in RATIO_METRICS:
        return Family(
            f"{PREFIX}{figure}_ratio", "histogram", origin_of(figure), "ratio", figure, 1.0
        )
    stem = figure.removesuffix("_ms")
    return Family(
        f"{PREFIX}{stem}_seconds", "histogram", origin_of(figure), "seconds", figure, 1e-3
    )


#: figure name (docs/metrics.md) → its histogram family, for every histogram figure
HISTOGRAMS: Final = {figure: _histogram(figure) for figure in HISTOGRAM_METRICS_IN_ORDER}

#: every family by name (metadata and the docs check)
FAMILIES: Final = {f.name: f for f in (*COUNTERS, *GAUGES, *HISTOGRAMS.values())}


def histogram_of(figure: str) -> Family | None:
    """The histogram family a recorded figure is pushed as (None: not a histogram figure)."""
    return HISTOGRAMS.get(figure)


def new_run_id(command: str) -> str:
    """A run's id: the command, the UTC start and 6 random hex digits (``load-20260101T120000Z-a1b2c3``)."""
    return f"{command}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(3)}"


def target_label(url: str) -> str:
    """The ``target`` label of a duplex URL: scheme, host, port and path; no credentials and
    no query (the client's ``autostart=0``, an API key someone put there)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
