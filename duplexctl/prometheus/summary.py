"""Scraped samples → what report.json and the printed summary say (pure; docs/metrics.md
"Server metrics").

* **Counters** count since the server started, so only their change over a window means
  anything: the delta (a value that goes down is a server restart: counting starts again).
* **Gauges**: min / mean / max of the scraped values in the window (mean over scrapes at a
  fixed interval: a time average).
* **Histograms**: the bucket counts' delta over the window, and percentiles from it,
  interpolated inside the bucket as Prometheus' ``histogram_quantile`` does (so a p99 is only
  as fine as the server's buckets).

The key series (running / waiting requests, KV cache usage, GPU utilisation when a DCGM
exporter is scraped, duplex sessions in grace) are combined over an endpoint's label sets
(sum of requests and sessions, mean of usage), per window: the whole run, each time slice of
the report, each capacity step. A capacity search's knee is explained by comparing the key
series of the last step that passed with the first that failed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from duplexctl.prometheus.store import FILE_NAME, SeriesKey, Store

PERCENTILES: Final = (50.0, 90.0, 99.0)
#: labels every vLLM series carries: left out of the printed summary's counter lines
QUIET_LABELS: Final = frozenset({"model_name", "engine", "stage", "replica"})


@dataclass(frozen=True, slots=True)
class KeySeries:
    key: str
    name: str  # the family (series) name scraped
    label: str  # how the summary says it
    combine: Literal["sum", "mean"]
    headline: Literal["max", "mean"]  # which statistic the knee and dashboard quote
    fmt: str


KEY_SERIES: Final = (
    KeySeries("running", "vllm:num_requests_running", "running requests", "sum", "max", ".0f"),
    KeySeries("waiting", "vllm:num_requests_waiting", "waiting requests", "sum", "max", ".0f"),
    KeySeries(
        "kv_cache_usage", "vllm:kv_cache_usage_perc", "KV cache usage", "mean", "mean", ".2f"
    ),
    KeySeries("gpu_util", "DCGM_FI_DEV_GPU_UTIL", "GPU utilisation %", "mean", "mean", ".0f"),
    KeySeries(
        "sessions_in_grace",
        "duplexctl:duplex_sessions_in_grace",
        "sessions in disconnect grace",
        "sum",
        "max",
        ".0f",
    ),
)


def _labels(key: SeriesKey) -> dict[str, str]:
    return dict(key[2])


def _in(times: Sequence[float], values: Sequence[float], t0: float, t1: float) -> list[float]:
    return [v for t, v in zip(times, values, strict=True) if t0 <= t <= t1]


def counter_delta(times: Sequence[float], values: Sequence[float], t0: float, t1: float) -> float:
    """Increase over [t0, t1] from the last value at or before t0 (else the first after it);
    a drop is a restart, after which the new value counts in full."""
    before = [v for t, v in zip(times, values, strict=True) if t <= t0]
    inside = _in(times, values, t0, t1)
    points = ([before[-1]] if before else []) + [
        v for t, v in zip(times, values, strict=True) if t0 < t <= t1
    ]
    if not before and inside:
        points = inside
    delta = 0.0
    for a, b in itertools.pairwise(points):
        delta += b - a if b >= a else b
    return delta


def gauge_stats(values: Sequence[float]) -> dict[str, float] | None:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    return {
        "min": min(finite),
        "mean": sum(finite) / len(finite),
        "max": max(finite),
        "n": len(finite),
    }


def quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus ``histogram_quantile``: ``buckets`` are (upper bound, cumulative count)."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    total = ordered[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound  # the +Inf bucket: its lower bound is all that is known
            if count == prev_count:
                return bound
            lower = prev_bound if prev_bound < bound else 0.0
            return lower + (bound - lower) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


class Summariser:
    """The summaries of one store, for any window of the run's clock."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._types = {k: f.type for k, f in store.families.items()}

    def _type(self, key: SeriesKey, family: str) -> str:
        return self._types.get((key[0], family), "untyped")

    def counters(self, t0: float, t1: float) -> list[dict[str, Any]]:
        out = []
        for key, family, times, values in self.store.series():
            if self._type(key, family) != "counter" or key[1].endswith("_created"):
                continue
            out.append(
                {
                    "endpoint": key[0],
                    "name": key[1],
                    "labels": _labels(key),
                    "delta": counter_delta(times, values, t0, t1),
                }
            )
        return out

    def gauges(self, t0: float, t1: float) -> list[dict[str, Any]]:
        out = []
        for key, family, times, values in self.store.series():
            if self._type(key, family) not in ("gauge", "untyped", "unknown"):
                continue
            if key[1].endswith("_created"):
                continue
            stats = gauge_stats(_in(times, values, t0, t1))
            if stats is not None:
                out.append({"endpoint": key[0], "name": key[1], "labels": _labels(key), **stats})
        return out

    def histograms(self, t0: float, t1: float) -> list[dict[str, Any]]:
        groups: dict[tuple[str, str, tuple[tuple[str, str], ...]], dict[str, Any]] = {}
        for key, family, times, values in self.store.series():
            if self._type(key, family) != "histogram":
                continue
            labels = tuple((k, v) for k, v in key[2] if k != "le")
            group = groups.setdefault((key[0], family, labels), {"buckets": []})
            delta = counter_delta(times, values, t0, t1)
            if key[1].endswith("_bucket"):
                group["buckets"].append((float(dict(key[2]).get("le", "inf")), delta))
            elif key[1].endswith("_count"):
                group["count"] = delta
            elif key[1].endswith("_sum"):
                group["sum"] = delta
        out = []
        for (endpoint, family, labels), g in groups.items():
            count = g.get("count", max((c for _, c in g["buckets"]), default=0.0))
            entry: dict[str, Any] = {
                "endpoint": endpoint,
                "name": family,
                "labels": dict(labels),
                "count": count,
                "sum": g.get("sum"),
                "mean": (g["sum"] / count) if count and g.get("sum") is not None else None,
            }
            for p in PERCENTILES:
                entry[f"p{p:g}"] = quantile(p / 100.0, g["buckets"]) if count else None
            out.append(entry)
        return out

    def key(self, t0: float, t1: float) -> dict[str, dict[str, float]]:
        """The key series over [t0, t1], combined over label sets per scrape."""
        out: dict[str, dict[str, float]] = {}
        for spec in KEY_SERIES:
            by_instant: dict[tuple[str, float], list[float]] = {}
            for key, _family, times, values in self.store.series():
                if key[1] != spec.name:
                    continue
                for t, v in zip(times, values, strict=True):
                    if t0 <= t <= t1:
                        by_instant.setdefault((key[0], t), []).append(v)
            combined = [
                sum(vs) if spec.combine == "sum" else sum(vs) / len(vs)
                for vs in by_instant.values()
            ]
            stats = gauge_stats(combined)
            if stats is not None:
                out[spec.key] = stats
        return out


def summarise(
    store: Store,
    *,
    endpoints: Iterable[dict[str, Any]],
    interval_s: float,
    slices: Sequence[tuple[float, float]] = (),
    warnings: dict[str, str] | None = None,
) -> dict[str, Any]:
    """report.json's ``server_metrics`` section (its shape: docs/metrics.md)."""
    s = Summariser(store)
    end = max((t[-1] for t in store.times.values() if t), default=0.0)
    start = min((t[0] for t in store.times.values() if t), default=0.0)
    t0, t1 = min(0.0, start), end
    eps = []
    for e in endpoints:
        ok, failed = store.scrapes.get(e["url"], [0, 0])
        eps.append(
            {**e, "scrapes": ok, "failures": failed, "warning": (warnings or {}).get(e["url"])}
        )
    steps = [
        {"label": label, "t0": a, "t1": b, "key": s.key(a, b), "gauges": s.gauges(a, b)}
        for label, a, b in store.windows
    ]
    return {
        "clock": "seconds since the run started (the clock of the report's slices)",
        "interval_s": interval_s,
        "endpoints": eps,
        "window": {"t0": t0, "t1": t1},
        "key": s.key(t0, t1),
        "counters": s.counters(t0, t1),
        "gauges": s.gauges(t0, t1),
        "histograms": s.histograms(t0, t1),
        "slices": [
            {"start_s": a, "end_s": b, "key": s.key(a, b), "gauges": s.gauges(a, b)}
            for a, b in slices
        ],
        "steps": steps,
    }


def explain_knee(
    section: dict[str, Any], passed: int | None, failed: int | None, unit: str
) -> dict[str, Any] | None:
    """The capacity search's knee in server terms: each key series at the last level that
    passed → the first that failed, e.g. "at 12 sessions: waiting requests 0 → 9, KV cache
    usage 0.41 → 0.93"."""
    if failed is None:
        return None
    by_label = {step["label"]: step["key"] for step in section.get("steps", [])}
    after = by_label.get(str(failed))
    if after is None:
        return None
    before = by_label.get(str(passed), {}) if passed is not None else {}
    changes = []
    for spec in KEY_SERIES:
        if spec.key not in after:
            continue
        b = before.get(spec.key, {}).get(spec.headline)
        a = after[spec.key][spec.headline]
        if not a and not b:
            continue  # nothing happened on this series: nothing to explain
        changes.append(
            {
                "series": spec.key,
                "name": spec.name,
                "statistic": spec.headline,
                "before": b,
                "after": a,
                "text": f"{spec.label} {'?' if b is None else format(b, spec.fmt)} → "
                f"{format(a, spec.fmt)}",
            }
        )
    if not changes:
        return None
    since = f" (from {passed} {unit})" if passed is not None else ""
    return {
        "level": failed,
        "previous_level": passed,
        "changes": changes,
        "text": f"at {failed} {unit}: " + ", ".join(c["text"] for c in changes) + since,
    }


def saved_section(directory: Path, report: Mapping[str, Any]) -> dict[str, Any] | None:
    """A saved run's ``server_metrics``, summarised again from its ``server_metrics.jsonl``
    when the file is there (``duplexctl report`` re-renders), else the one its report.json
    holds (or None)."""
    path = directory / FILE_NAME
    if not path.is_file():
        section = report.get("server_metrics")
        return dict(section) if isinstance(section, dict) else None
    store = Store.read(path)
    cap = report.get("capacity_search")
    slices = (
        [] if cap else [(float(s["start_s"]), float(s["end_s"])) for s in report.get("slices", [])]
    )
    section = summarise(
        store,
        endpoints=store.header.get("endpoints", []),
        interval_s=float(store.header.get("interval_s", 0.0)),
        slices=slices,
        warnings=store.errors,
    )
    if cap:
        section["knee"] = explain_knee(
            section, cap.get("largest_pass"), cap.get("first_fail"), cap["unit"]
        )
    return section


def dashboard_line(store: Store, endpoints: int) -> str:
    """The live view's server line: the latest value of each key series scraped."""
    parts = []
    for spec in KEY_SERIES:
        latest = store.latest(spec.name)
        if not latest:
            continue
        value = sum(latest) if spec.combine == "sum" else sum(latest) / len(latest)
        parts.append(f"{spec.label} {format(value, spec.fmt)}")
    if not parts:
        return f"server: no metrics yet from {endpoints} endpoint(s)"
    return "server: " + ", ".join(parts)


def render_lines(section: dict[str, Any]) -> list[str]:
    """The printed summary's ``server metrics`` block."""
    lines = ["server metrics (scraped every {:g} s):".format(section["interval_s"])]
    for e in section["endpoints"]:
        state = f"{e['scrapes']} scrapes"
        if e["failures"]:
            state += f", {e['failures']} failed"
        if e.get("warning"):
            state += f" ({e['warning']})"
        lines.append(f"  {e['url']}: {state}")
    key = section.get("key", {})
    for spec in KEY_SERIES:
        if spec.key in key:
            st = key[spec.key]
            lines.append(
                f"  {spec.label}: min {format(st['min'], spec.fmt)} mean "
                f"{st['mean']:.2f} max {format(st['max'], spec.fmt)}"
            )
    for h in section.get("histograms", []):
        if not h["count"]:
            continue
        ps = " ".join(
            f"p{p:g} {h[f'p{p:g}']:.3f}" for p in PERCENTILES if h.get(f"p{p:g}") is not None
        )
        lines.append(f"  {h['name']}: {h['count']:.0f} in the run, {ps} s")
    for c in section.get("counters", []):
        if c["delta"]:
            label = ",".join(f"{k}={v}" for k, v in c["labels"].items() if k not in QUIET_LABELS)
            lines.append(f"  {c['name']}{'{' + label + '}' if label else ''}: +{c['delta']:g}")
    knee = section.get("knee")
    if knee:
        lines.append(f"  knee: {knee['text']}")
    return lines
