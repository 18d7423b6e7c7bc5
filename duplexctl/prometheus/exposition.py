"""A scraped ``/metrics`` body → metric families, with prometheus_client's parsers.

Why prometheus_client and not a hand-written parser: it is the library vLLM itself exposes
with, so escaping, ``_total`` / ``_created`` / ``_bucket`` series and OpenMetrics'
``# EOF`` are read exactly as they were written. The text format is asked for (its names are
the ones vLLM documents); an endpoint answering OpenMetrics anyway is parsed with the
OpenMetrics parser.
What is not an exposition (an HTML page, garbage) is a :class:`NotMetrics` naming why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families

#: What the scraper asks for: the text format only. prometheus_client (vLLM's exposition)
#: answers OpenMetrics as soon as the header mentions it, whatever its q, and its OpenMetrics
#: output spells ``vllm:x`` samples as ``vllm_x``.
ACCEPT: Final = "text/plain;version=0.0.4"
#: Families of the exporting process itself, not of the server's work: not summarised.
PROCESS_PREFIXES: Final = ("python_", "process_")


class NotMetrics(ValueError):
    """The body is not a Prometheus exposition (the message says what it looks like)."""


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family as read: its name, type (counter, gauge, histogram, summary,
    untyped …), help text and samples."""

    name: str
    type: str
    help: str
    samples: tuple[Sample, ...]


def parse(body: bytes, content_type: str = "") -> list[Family]:
    """Parse one scrape; :class:`NotMetrics` if it is not an exposition."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise NotMetrics("the body is not UTF-8 text") from None
    head = text.lstrip()[:200].lower()
    if "html" in content_type.lower() or head.startswith(("<!doctype", "<html", "<")):
        raise NotMetrics("it answered an HTML page, not a Prometheus exposition")
    openmetrics = "openmetrics" in content_type.lower()
    reader = openmetrics_families if openmetrics else text_families
    try:
        families = [
            Family(
                name=f.name,
                type=f.type,
                help=f.documentation,
                samples=tuple(Sample(s.name, dict(s.labels), float(s.value)) for s in f.samples),
            )
            for f in reader(text)
        ]
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        first = text.strip().splitlines()[0][:80] if text.strip() else ""
        raise NotMetrics(f"not a Prometheus exposition ({exc}; first line {first!r})") from None
    if not families and text.strip():
        raise NotMetrics("no metric family in the body")
    return families
