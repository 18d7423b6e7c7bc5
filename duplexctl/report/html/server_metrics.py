"""The load page's server metrics: report.json's ``server_metrics`` (its shape:
docs/metrics.md "Server metrics", built by ``duplexctl/prometheus/summary.py``) turned into
the rows the page draws and tabulates.

Why the key series are read with the summary's own ``KEY_SERIES`` (label, how each is
combined, which statistic is quoted): the page, the printed summary and the knee text then
say the same thing in the same words — queue lengths by their max in a window, usage by its
mean. Sessions active is not a key series of the summary (the knee does not need it) but a
gauge every ``duplexctl serve`` exposes; it is summed over the gauge's label sets here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from duplexctl.prometheus.summary import KEY_SERIES, QUIET_LABELS, histogram_text

SESSIONS_ACTIVE: Final = "duplexctl:duplex_sessions_active"
#: the legend name of each server series on the page (the client's slice rows use other names)
LABELS: Final = {
    **{spec.key: spec.label for spec in KEY_SERIES},
    "sessions_active": "sessions active (server)",
}
#: (title, key series, unit): the server's panels, under the latency slices or per step
PANELS: Final = (
    ("server: requests running and waiting (max)", ("running", "waiting"), "requests"),
    ("server: KV cache usage (mean)", ("kv_cache_usage",), "fraction"),
    ("server: GPU utilisation (mean)", ("gpu_util",), "%"),
    (
        "server: duplex sessions active and in disconnect grace (max)",
        ("sessions_active", "sessions_in_grace"),
        "sessions",
    ),
)


def documented(section: Any) -> bool:
    """Whether a section has the documented shape (anything else is shown as JSON)."""
    return isinstance(section, Mapping) and isinstance(section.get("key"), Mapping)


def window_values(window: Mapping[str, Any]) -> dict[str, float]:
    """One window's (a time slice's or a capacity step's) server values, by legend name."""
    out: dict[str, float] = {}
    key = window.get("key") or {}
    for spec in KEY_SERIES:
        if spec.key in key:
            out[LABELS[spec.key]] = key[spec.key][spec.headline]
    active = [g["max"] for g in window.get("gauges") or [] if g.get("name") == SESSIONS_ACTIVE]
    if active:
        out[LABELS["sessions_active"]] = sum(active)
    return out


def panels(
    rows: Sequence[Mapping[str, Any]], *, per: str
) -> list[tuple[str, tuple[str, ...], str]]:
    """The panels that have data in ``rows`` (GPU utilisation only with a DCGM endpoint)."""
    out = []
    for title, keys, unit in PANELS:
        fields = tuple(LABELS[k] for k in keys)
        if any(r.get(f) is not None for r in rows for f in fields):
            out.append((f"{title} per {per}", fields, unit))
    return out


def slice_rows(section: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per time slice: its span and the server values (rows for ``charts.time_panels``)."""
    return [
        {
            "t_s": (s["start_s"] + s["end_s"]) / 2,
            "start_s": s["start_s"],
            "end_s": s["end_s"],
            **window_values(s),
        }
        for s in section.get("slices") or []
        if s.get("key") or s.get("gauges")
    ]


def step_rows(section: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per capacity-search step (its label is the level): the server values."""
    rows = []
    for step in section.get("steps") or []:
        try:
            level = float(step["label"])
        except (KeyError, TypeError, ValueError):
            continue
        values = window_values(step)
        if values:
            rows.append({"level": level, **values})
    return sorted(rows, key=lambda r: r["level"])


def _labels(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in labels.items() if k not in QUIET_LABELS)


def view(section: Mapping[str, Any]) -> dict[str, Any]:
    """What the template's tables show of one run's section."""
    key = section.get("key") or {}
    whole = [{"label": spec.label, **key[spec.key]} for spec in KEY_SERIES if spec.key in key]
    whole += [
        {**g, "label": " ".join(filter(None, (LABELS["sessions_active"], _labels(g["labels"]))))}
        for g in section.get("gauges") or []
        if g.get("name") == SESSIONS_ACTIVE
    ]
    counters = sorted(
        (
            {"name": c["name"], "labels": _labels(c.get("labels") or {}), "delta": c["delta"]}
            for c in section.get("counters") or []
        ),
        key=lambda c: (c["delta"] == 0, c["name"], c["labels"]),
    )
    histograms = [
        {**h, "labels": _labels(h.get("labels") or {}), "text": histogram_text(h)}
        for h in section.get("histograms") or []
    ]
    return {
        "source": section.get("source"),
        "interval_s": section.get("interval_s"),
        "endpoints": list(section.get("endpoints") or []),
        "whole": whole,
        "counters": counters,
        "histograms": sorted(histograms, key=lambda h: (not h.get("count"), h["name"])),
        "knee": (section.get("knee") or {}).get("text"),
    }


def raw(section: Any) -> str:
    """A section of another shape, as recorded (bounded: the page stays small)."""
    return json.dumps(section, indent=1, default=str)[:200_000]
