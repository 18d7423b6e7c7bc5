"""``duplexctl report A B --compare``: did B (the candidate) change against A (the baseline)?

Method (docs/report.md "Comparing runs"): for each figure and percentile, both runs'
per-turn values are read from their ``turns.jsonl`` (warm-up excluded), and the difference
B − A of the percentile is bootstrapped: both samples are resampled with replacement
``RESAMPLES`` times and the percentile recomputed each time. The change is *significant*
when the confidence interval of the difference excludes 0; the intervals are
Bonferroni-corrected over all the comparisons made (family-wise 95 %), so an A/A pair
flags nothing 95 % of the time however many figures are compared. A significant change is
*flagged* only when it is also at least ``MIN_CHANGE`` of the baseline: with thousands of
turns a 1 ms shift is detectable, and nobody should be paged for it.

A percentile is compared only where each run has enough samples beyond it
(``n × (1 − p) ≥ MIN_TAIL``: p50 from 10 turns, p95 from 100, p99 from 500); below that
both values are shown with the note ``too few samples``, never flagged. The bootstrap has a
fixed seed, so the same two runs always give the same verdict.

Why the bootstrap and not the histograms: a percentile's sampling distribution has no
simple closed form, and the bootstrap needs only the samples, which turns.jsonl keeps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from duplexctl.errors import BadInput

KIND: Final = "duplexctl.compare"
RESAMPLES: Final = 2000
FAMILY_CONFIDENCE: Final = 0.95
MIN_CHANGE: Final = 0.05
MIN_TAIL: Final = 5
PERCENTILES: Final = (50.0, 95.0, 99.0)
#: the figures compared, in this order; lower is better for every one of them
FIGURES: Final = (
    "ttfa_ms",
    "ttft_ms",
    "first_audible_ms",
    "turn_ms",
    "ttfa_commit_ms",
    "ttfa_created_ms",
    "cancel_ack_ms",
    "post_interrupt_ttfa_ms",
    "resume_ms",
)
SEED: Final = 20


def turn_samples(run: str | Path) -> tuple[Path, dict[str, np.ndarray]]:
    """Per-figure values of a run's turns after warm-up (a --out directory, or the
    report.json inside one: its turns.jsonl is read)."""
    p = Path(run)
    folder = p if p.is_dir() else p.parent
    path = folder / "turns.jsonl"
    if not path.is_file():
        raise BadInput(
            f"{run}: no turns.jsonl beside the report (--compare needs the per-turn values a load --out directory keeps)"
        )
    values: dict[str, list[float]] = {f: [] for f in FIGURES}
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                turn = json.loads(line)
            except json.JSONDecodeError:
                raise BadInput(f"{path}:{lineno}: not a JSON line") from None
            if not isinstance(turn, dict) or turn.get("phase") == "warmup":
                continue
            figures = turn.get("figures") or {}
            for name in FIGURES:
                v = (figures.get(name) or {}).get("value")
                if isinstance(v, int | float) and not isinstance(v, bool):
                    values[name].append(float(v))
    return path, {k: np.asarray(v, dtype=float) for k, v in values.items() if v}


def _percentiles(samples: np.ndarray, ps: Sequence[float]) -> np.ndarray:
    """Percentiles by the nearest-rank rule (a value that occurred, as HDR reports)."""
    return np.percentile(samples, ps, axis=-1, method="inverted_cdf")


def _bootstrap(
    a: np.ndarray, b: np.ndarray, ps: Sequence[float], rng: np.random.Generator
) -> np.ndarray:
    """RESAMPLES × len(ps) differences B − A of the percentiles, in chunks (bounded memory)."""
    out = np.empty((RESAMPLES, len(ps)))
    chunk = max(1, 2_000_000 // max(len(a), len(b)))
    for start in range(0, RESAMPLES, chunk):
        k = min(chunk, RESAMPLES - start)
        ra = a[rng.integers(0, len(a), size=(k, len(a)))]
        rb = b[rng.integers(0, len(b), size=(k, len(b)))]
        out[start : start + k] = (_percentiles(rb, ps) - _percentiles(ra, ps)).T
    return out


def compare(baseline: str | Path, candidate: str | Path) -> dict[str, Any]:
    """The comparison document (printed, ``--json``, and the HTML page)."""
    path_a, a = turn_samples(baseline)
    path_b, b = turn_samples(candidate)
    pairs = [
        (name, p)
        for name in FIGURES
        if name in a and name in b
        for p in PERCENTILES
        if min(len(a[name]), len(b[name])) * (1 - p / 100) >= MIN_TAIL
    ]
    tested = len(pairs)
    alpha = (1 - FAMILY_CONFIDENCE) / max(tested, 1)
    rng = np.random.default_rng(SEED)
    rows: list[dict[str, Any]] = []
    for name in FIGURES:
        if name not in a or name not in b:
            continue
        ps = [p for p in PERCENTILES if (name, p) in pairs]
        diffs = _bootstrap(a[name], b[name], ps, rng) if ps else np.empty((0, 0))
        va, vb = _percentiles(a[name], PERCENTILES), _percentiles(b[name], PERCENTILES)
        for i, p in enumerate(PERCENTILES):
            row: dict[str, Any] = {
                "figure": name,
                "stat": f"p{p:g}",
                "baseline": float(va[i]),
                "candidate": float(vb[i]),
                "n_baseline": len(a[name]),
                "n_candidate": len(b[name]),
                "change": float(vb[i] - va[i]),
                "change_pct": float(100 * (vb[i] - va[i]) / va[i]) if va[i] else None,
                "ci_low": None,
                "ci_high": None,
                "significant": False,
                "flagged": False,
                "note": "",
            }
            if p in ps:
                j = ps.index(p)
                lo, hi = np.quantile(diffs[:, j], [alpha / 2, 1 - alpha / 2])
                significant = bool(lo > 0 or hi < 0)
                big = abs(row["change"]) >= MIN_CHANGE * abs(row["baseline"])
                row.update(
                    ci_low=float(lo),
                    ci_high=float(hi),
                    significant=significant,
                    flagged=significant and big,
                    note=""
                    if big or not significant
                    else "significant but below the minimum change",
                )
            else:
                row["note"] = "too few samples"
            row["worse"] = row["flagged"] and row["change"] > 0
            rows.append(row)
    return {
        "kind": KIND,
        "baseline": str(path_a.parent),
        "candidate": str(path_b.parent),
        "method": "bootstrap of the percentile difference over turns.jsonl (docs/report.md)",
        "resamples": RESAMPLES,
        "family_confidence": FAMILY_CONFIDENCE,
        "comparisons": tested,
        "interval_confidence": 1 - alpha,
        "min_change_pct": 100 * MIN_CHANGE,
        "rows": rows,
        "flagged": [f"{r['figure']} {r['stat']}" for r in rows if r["flagged"]],
    }


def regressions(doc: Mapping[str, Any], pct: float) -> list[dict[str, Any]]:
    """Flagged rows that got worse by more than ``pct`` percent (``--fail-on-regression``)."""
    return [
        r
        for r in doc["rows"]
        if r["worse"] and r["change_pct"] is not None and r["change_pct"] > pct
    ]


def lines(doc: Mapping[str, Any]) -> list[str]:
    """The comparison as printed lines: one per figure and percentile."""
    out = [
        f"compare: baseline {doc['baseline']} vs candidate {doc['candidate']} "
        f"({doc['comparisons']} comparisons, {100 * doc['interval_confidence']:.2f} % bootstrap intervals, "
        f"flagged when significant and at least {doc['min_change_pct']:g} %)"
    ]
    for r in doc["rows"]:
        pct = "" if r["change_pct"] is None else f" ({r['change_pct']:+.1f} %)"
        ci = "" if r["ci_low"] is None else f" CI [{r['ci_low']:+.4g}, {r['ci_high']:+.4g}]"
        mark = ("REGRESSION" if r["change"] > 0 else "IMPROVEMENT") if r["flagged"] else r["note"]
        out.append(
            f"  {r['figure']} {r['stat']}: {r['baseline']:.4g} (n={r['n_baseline']}) -> "
            f"{r['candidate']:.4g} (n={r['n_candidate']}) {r['change']:+.4g}{pct}{ci}"
            + (f"  {mark}" if mark else "")
        )
    out.append("compare: flagged: " + (", ".join(doc["flagged"]) if doc["flagged"] else "nothing"))
    return out
