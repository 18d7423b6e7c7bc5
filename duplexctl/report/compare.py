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

The behaviour figures (docs/metrics.md "Conversation behaviour") come from
``behaviour.jsonl`` (one line per session's conversation, every trial in it): the times
``stop_latency_ms`` and ``response_gap_ms`` per trial, compared like the turns' figures, and
the rates ``takeover_rate`` and ``no_response_rate`` as proportions (stat ``rate``): each
trial is a 0 or a 1, the difference of the means is bootstrapped the same way, in the same
Bonferroni family, with the same 5 % rule, and compared from as many trials as p50 (10).
A run without ``behaviour.jsonl`` (an older one) simply has no behaviour rows.

A conversation's trials are not independent: a model that takes over one pause of a
conversation is likely to take over its next (the same context, the same voice). So the
behaviour figures are bootstrapped by conversation (a cluster bootstrap): each resample
draws whole conversations with replacement and pools their trials, so the interval is as
wide as the spread *between* conversations makes it. That needs enough conversations:
below ``MIN_CONVERSATIONS`` in either run a behaviour figure is shown with the note ``too
few conversations`` and never flagged. The turns' figures are resampled turn by turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Final, TypeGuard

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
#: behaviour times: one value per trial in behaviour.jsonl; lower is better
BEHAVIOUR_TIMES: Final = ("stop_latency_ms", "response_gap_ms")
#: behaviour rates: name -> (the count of 1s, the n it is over) in behaviour.jsonl; lower
#: is better (the model took over a pause; a turn end went unanswered)
BEHAVIOUR_RATES: Final = {
    "takeover_rate": ("takeovers", "pause_trials"),
    "no_response_rate": ("unanswered_turn_ends", "turn_ends"),
}
#: the statistic of a rate: the mean of its 0/1 trials
RATE: Final = "rate"
#: behaviour figures are bootstrapped by conversation; fewer than this in a run is no test
MIN_CONVERSATIONS: Final = 5


@dataclass(frozen=True)
class Sample:
    """One figure's values in one run. ``conversations`` numbers the conversation each value
    came from (the unit a behaviour figure is resampled by); ``None``: every value is its
    own unit (the turns' figures)."""

    values: np.ndarray
    conversations: np.ndarray | None = None

    @cached_property
    def by_value(self) -> tuple[np.ndarray, np.ndarray]:
        """The values in ascending order, and each one's conversation numbered 0 … units − 1
        (what a conversation resample weighs them by); computed once, not per resample."""
        assert self.conversations is not None, "resampled value by value"
        order = np.argsort(self.values, kind="stable")
        _, owner = np.unique(self.conversations[order], return_inverse=True)
        return self.values[order], owner

    @cached_property
    def units(self) -> int:
        """How many independent units the sample holds (conversations, or values)."""
        if self.conversations is None:
            return len(self.values)
        return int(self.by_value[1].max()) + 1


def turn_samples(run: str | Path) -> tuple[Path, dict[str, Sample]]:
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
    for turn in _measured(path):
        figures = turn.get("figures") or {}
        for name in FIGURES:
            v = (figures.get(name) or {}).get("value")
            if _number(v):
                values[name].append(float(v))
    samples = {k: Sample(np.asarray(v, dtype=float)) for k, v in values.items() if v}
    samples.update(behaviour_samples(folder / "behaviour.jsonl"))
    return path, samples


def _measured(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON lines of a run's file after warm-up; a line that is not JSON is one clear
    error (exit 2)."""
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise BadInput(f"{path}:{lineno}: not a JSON line") from None
            if isinstance(record, dict) and record.get("phase") != "warmup":
                yield record


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def behaviour_samples(path: Path) -> dict[str, Sample]:
    """Per-trial behaviour values of a run after warm-up (``behaviour.jsonl``; none when the
    run has no such file), each numbered by its conversation (its line): each time, and
    each rate as its trials' 0s and 1s."""
    if not path.is_file():
        return {}
    values: dict[str, list[float]] = {}
    owners: dict[str, list[int]] = {}

    def add(name: str, conversation: int, trials: Sequence[float]) -> None:
        values.setdefault(name, []).extend(trials)
        owners.setdefault(name, []).extend([conversation] * len(trials))

    for index, conversation in enumerate(_measured(path)):
        for name in BEHAVIOUR_TIMES:
            times = conversation.get(name)
            if isinstance(times, list):
                add(name, index, [float(v) for v in times if _number(v)])
        for name, (ones, of) in BEHAVIOUR_RATES.items():
            k, n = conversation.get(ones), conversation.get(of)
            if _count(k) and _count(n) and k <= n:
                add(name, index, [1.0] * k + [0.0] * (n - k))
    return {
        name: Sample(np.asarray(v, dtype=float), np.asarray(owners[name], dtype=np.intp))
        for name, v in values.items()
        if v
    }


def _statistics(samples: np.ndarray, stats: Sequence[str]) -> np.ndarray:
    """The statistics over the last axis, one row each: percentiles (``p50`` …) by the
    nearest-rank rule (a value that occurred, as HDR reports), or ``rate`` (the mean of 0/1
    trials; a figure's stats are all percentiles or the rate alone)."""
    if list(stats) == [RATE]:
        return np.mean(samples, axis=-1)[np.newaxis]
    ps = [float(s.removeprefix("p")) for s in stats]
    return np.percentile(samples, ps, axis=-1, method="inverted_cdf")


def _tail_share(stat: str) -> float:
    """The share of a sample beyond the statistic (a rate counts as its median)."""
    return 0.5 if stat == RATE else 1 - float(stat.removeprefix("p")) / 100


def _weighted_statistics(
    ordered: np.ndarray, weights: np.ndarray, stats: Sequence[str]
) -> np.ndarray:
    """The statistics of values (sorted ascending) counted ``weights`` times each, one row
    per resample of ``weights`` (resamples × values): the same nearest-rank percentile, or
    the same mean, that :func:`_statistics` takes of the values repeated."""
    if list(stats) == [RATE]:
        return ((weights @ ordered) / weights.sum(axis=1))[np.newaxis]
    cum = np.cumsum(weights, axis=1)
    out = np.empty((len(stats), len(weights)))
    for i, stat in enumerate(stats):
        # the first value whose cumulative count reaches p % of the total (integer counts
        # and whole percents, so p × total / 100 is exact where it is whole)
        rank = float(stat.removeprefix("p")) * cum[:, -1] / 100
        out[i] = ordered[np.argmax(cum >= rank[:, np.newaxis], axis=1)]
    return out


def _resampled(
    sample: Sample, stats: Sequence[str], k: int, rng: np.random.Generator
) -> np.ndarray:
    """``k`` bootstrap replicates of the statistics (stats × k): values drawn one by one,
    or whole conversations drawn and their trials pooled."""
    if sample.conversations is None:
        drawn = sample.values[rng.integers(0, len(sample.values), size=(k, len(sample.values)))]
        return _statistics(drawn, stats)
    ordered, owner = sample.by_value
    units = sample.units
    draws = rng.multinomial(units, np.full(units, 1.0 / units), size=k)
    return _weighted_statistics(ordered, draws[:, owner], stats)


def _bootstrap(a: Sample, b: Sample, stats: Sequence[str], rng: np.random.Generator) -> np.ndarray:
    """RESAMPLES × len(stats) differences B − A of the statistics, in chunks (bounded
    memory)."""
    out = np.empty((RESAMPLES, len(stats)))
    chunk = max(1, 2_000_000 // max(len(a.values), len(b.values)))
    for start in range(0, RESAMPLES, chunk):
        k = min(chunk, RESAMPLES - start)
        out[start : start + k] = (_resampled(b, stats, k, rng) - _resampled(a, stats, k, rng)).T
    return out


def _why_untested(a: Sample, b: Sample, stat: str) -> str | None:
    """Why a statistic is shown but not tested (the note), or None: each run needs
    ``MIN_TAIL`` values beyond it and, resampled by conversation, ``MIN_CONVERSATIONS``."""
    if min(len(a.values), len(b.values)) * _tail_share(stat) < MIN_TAIL:
        return "too few samples"
    if a.conversations is not None and min(a.units, b.units) < MIN_CONVERSATIONS:
        return "too few conversations"
    return None


def _stats_of(name: str) -> tuple[str, ...]:
    return (RATE,) if name in BEHAVIOUR_RATES else tuple(f"p{p:g}" for p in PERCENTILES)


def compare(baseline: str | Path, candidate: str | Path) -> dict[str, Any]:
    """The comparison document (printed, ``--json``, and the HTML page)."""
    path_a, a = turn_samples(baseline)
    path_b, b = turn_samples(candidate)
    names = [n for n in (*FIGURES, *BEHAVIOUR_TIMES, *BEHAVIOUR_RATES) if n in a and n in b]
    untested = {
        (name, stat): _why_untested(a[name], b[name], stat)
        for name in names
        for stat in _stats_of(name)
    }
    pairs = [pair for pair, why in untested.items() if why is None]
    tested = len(pairs)
    alpha = (1 - FAMILY_CONFIDENCE) / max(tested, 1)
    rng = np.random.default_rng(SEED)
    rows: list[dict[str, Any]] = []
    for name in names:
        stats = _stats_of(name)
        ps = [stat for stat in stats if (name, stat) in pairs]
        diffs = _bootstrap(a[name], b[name], ps, rng) if ps else np.empty((0, 0))
        va, vb = _statistics(a[name].values, stats), _statistics(b[name].values, stats)
        clustered = a[name].conversations is not None
        for i, p in enumerate(stats):
            row: dict[str, Any] = {
                "figure": name,
                "stat": p,
                "baseline": float(va[i]),
                "candidate": float(vb[i]),
                "n_baseline": len(a[name].values),
                "n_candidate": len(b[name].values),
                "conversations_baseline": a[name].units if clustered else None,
                "conversations_candidate": b[name].units if clustered else None,
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
                row["note"] = untested[(name, p)]
            row["worse"] = row["flagged"] and row["change"] > 0
            rows.append(row)
    return {
        "kind": KIND,
        "baseline": str(path_a.parent),
        "candidate": str(path_b.parent),
        "method": "bootstrap of the percentile (rate) difference over turns.jsonl's turns "
        "and behaviour.jsonl's conversations (docs/report.md)",
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
