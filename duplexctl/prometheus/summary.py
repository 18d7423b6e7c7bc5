"""Scraped samples → what report.json and the printed summary say (pure; docs/metrics.md
"Server metrics").

* **Counters** count since the server started, so only their change over a window means
  anything: the delta (a value that goes down is a server restart: counting starts again).
* **Gauges**: min / mean / max of the scraped values in the window (mean over scrapes at a
  fixed interval: a time average).
* **Histograms**: the bucket counts' delta over the window, reported as what they know: the
  count, the mean (sum / count, exact) and, for each percentile, the bucket bounds it falls
  in (``p50 in (0.25, 0.5] s``). Not as interpolated points: Prometheus'
  ``histogram_quantile`` puts a p50 at 0.375 s when every value is 0.300 s, and at 150 ms
  in a bucket (0, 0.3] when every value is 0 — an operator reading that hunts a queue that
  does not exist. Where the sum is 0 every observation was 0 (the server's histograms are of
  durations), so every percentile is exactly 0, never positive; with fewer than
  ``MIN_SPREAD`` observations there is no spread to speak of, and only the count and the
  mean are given.

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
#: fewer observations than this in a window: count and mean only, no percentiles (a p50 /
#: p90 / p99 "spread" of one to four values is the same value or two, dressed up)
MIN_SPREAD: Final = 5
#: a sum this close to 0 (per observation) is 0: float deltas of a sum are not exact
ZERO_SUM: Final = 1e-12
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


def bucket_of(q: float, buckets: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """The bucket the ``q``-th quantile falls in, as (lower, upper] bounds: the first bucket
    whose cumulative count reaches ``q × count`` (``buckets`` are (upper bound, cumulative
    count)). The first bucket's lower bound is 0 (the histograms are of durations); the +Inf
    bucket's upper bound is ``inf``. None when the histogram counted nothing."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower = min(0.0, ordered[0][0])
    for bound, count in ordered:
        if count >= rank and count > 0:
            return (lower, bound)
        lower = bound
    return (lower, math.inf)


def histogram_percentiles(
    count: float, total: float | None, buckets: Sequence[tuple[float, float]]
) -> tuple[dict[str, dict[str, float | None] | None], str]:
    """Each percentile's bounds (``{"p50": {"low": 0.25, "high": 0.5}}``; ``high`` None is
    +Inf, ``low == high == 0`` exactly 0) and the note that qualifies them (module
    docstring): no percentiles below ``MIN_SPREAD`` observations, all 0 when the sum is 0."""
    keys = [f"p{p:g}" for p in PERCENTILES]
    if count <= 0:
        return dict.fromkeys(keys), ""
    if count < MIN_SPREAD:
        return dict.fromkeys(keys), f"count and mean only: a spread needs {MIN_SPREAD} observations"
    if total is not None and abs(total) <= ZERO_SUM * count:
        return {k: {"low": 0.0, "high": 0.0} for k in keys}, "sum 0: every observation was 0"
    out: dict[str, dict[str, float | None] | None] = {}
    for key, p in zip(keys, PERCENTILES, strict=True):
        found = bucket_of(p / 100.0, buckets)
        out[key] = (
            None
            if found is None
            else {"low": found[0], "high": None if math.isinf(found[1]) else found[1]}
        )
    return out, ""


def unit_of(name: str) -> str:
    """A scraped histogram's unit from its name: seconds for ``…_s`` / ``…_seconds``, none
    for the rest (``vllm_omni:audio_rtf`` is a ratio)."""
    return "s" if name.endswith(("_s", "_seconds")) else ""


def histogram_text(h: Mapping[str, Any], unit: str | None = None) -> str:
    """One scraped histogram in words: ``8 observations, mean 0.3 s, p50–p99 in (0.25, 0.5]
    s`` (the percentiles that share a bucket said once), or its note. ``unit``: by default
    the one its name says (:func:`unit_of`)."""
    unit = unit_of(str(h.get("name", "_s"))) if unit is None else unit
    unit = f" {unit}" if unit else ""
    count = h.get("count") or 0
    parts = [f"{count:g} observation{'s' if count != 1 else ''}"]
    if not count:
        return parts[0]
    if h.get("mean") is not None:
        parts.append(f"mean {h['mean']:.3g}{unit}")
    bounds = [(f"p{p:g}", h.get(f"p{p:g}")) for p in PERCENTILES]
    if all(isinstance(b, Mapping) for _k, b in bounds):
        groups: list[tuple[list[str], Mapping[str, Any]]] = []
        for key, b in bounds:
            if groups and groups[-1][1] == b:
                groups[-1][0].append(key)
            else:
                groups.append(([key], b))  # type: ignore[arg-type]
        for keys, b in groups:
            name = keys[0] if len(keys) == 1 else f"{keys[0]}–{keys[-1]}"
            if b["low"] == b["high"] == 0:
                parts.append(f"{name} 0{unit}")
            elif b["high"] is None:
                parts.append(f"{name} above {b['low']:g}{unit}")
            else:
                parts.append(f"{name} in ({b['low']:g}, {b['high']:g}]{unit}")
    text = ", ".join(parts)
    return f"{text} ({h['note']})" if h.get("note") else text


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
            total = g.get("sum")
            bounds, note = histogram_percentiles(count, total, g["buckets"])
            mean = (total / count) if count and total is not None else None
            if mean is not None and abs(mean) <= ZERO_SUM:
                mean = 0.0
            out.append(
                {
                    "endpoint": endpoint,
                    "name": family,
                    "labels": dict(labels),
                    "count": count,
                    "sum": total,
                    "mean": mean,
                    **bounds,
                    "note": note,
                }
            )
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


#: vLLM-Omni's audio continuity families (docs/metrics.md "Audio continuity")
AUDIO_UNDERRUN: Final = "vllm_omni:audio_underrun_s"
AUDIO_CONTINUITY_OK: Final = "vllm_omni:audio_continuity_ok"
AUDIO_RTF: Final = "vllm_omni:audio_rtf"


def audio_continuity(
    histograms: Sequence[Mapping[str, Any]], counters: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The server's own continuity figures over a window, beside the client's: its
    ``audio_underrun_s`` and ``audio_rtf`` histograms (count, mean, the percentiles' buckets;
    several label sets — stages, replicas — added: count and mean only), the
    ``audio_continuity_ok_total`` delta per ``threshold_ms`` and the OK rate it gives over the
    underrun's count (the responses it measured). None when the server exposes none of them."""

    def combined(name: str) -> dict[str, Any] | None:
        found = [h for h in histograms if h["name"] == name]
        if not found:
            return None
        if len(found) == 1:
            h = found[0]
            return {k: h.get(k) for k in ("count", "sum", "mean", "p50", "p90", "p99", "note")}
        count = sum(h["count"] or 0 for h in found)
        total = sum(h["sum"] or 0 for h in found)
        return {"count": count, "sum": total, "mean": total / count if count else None,
                "p50": None, "p90": None, "p99": None,
                "note": f"{len(found)} label sets added: count and mean only"}  # fmt: skip

    ok: dict[str, float] = {}
    for c in counters:
        if c["name"] in (AUDIO_CONTINUITY_OK, AUDIO_CONTINUITY_OK + "_total"):
            t = str(c["labels"].get("threshold_ms", "?"))
            ok[t] = ok.get(t, 0.0) + c["delta"]
    underrun, rtf = combined(AUDIO_UNDERRUN), combined(AUDIO_RTF)
    if underrun is None and rtf is None and not ok:
        return None
    measured = underrun["count"] if underrun else 0
    return {
        "audio_underrun_s": underrun,
        "continuity_ok": ok,
        "continuity_ok_rate": {t: (n / measured if measured else None) for t, n in ok.items()},
        "audio_rtf": rtf,
    }


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
        {
            "label": label,
            "t0": a,
            "t1": b,
            "key": s.key(a, b),
            "gauges": s.gauges(a, b),
            "audio": audio_continuity(s.histograms(a, b), s.counters(a, b)),
        }
        for label, a, b in store.windows
    ]
    histograms, counters = s.histograms(t0, t1), s.counters(t0, t1)
    return {
        "clock": "seconds since the run started (the clock of the report's slices)",
        "interval_s": interval_s,
        "endpoints": eps,
        "window": {"t0": t0, "t1": t1},
        "key": s.key(t0, t1),
        "counters": counters,
        "gauges": s.gauges(t0, t1),
        "histograms": histograms,
        "audio": audio_continuity(histograms, counters),
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
        lines.append(f"  {h['name']}: {histogram_text(h)}")
    for c in section.get("counters", []):
        if c["delta"]:
            label = ",".join(f"{k}={v}" for k, v in c["labels"].items() if k not in QUIET_LABELS)
            lines.append(f"  {c['name']}{'{' + label + '}' if label else ''}: +{c['delta']:g}")
    knee = section.get("knee")
    if knee:
        lines.append(f"  knee: {knee['text']}")
    return lines
