"""``duplexctl report A B --compare``: did B (the candidate) change against A (the baseline)?

It answers the two questions people bring to a load run, in their order: how many
conversations does the server hold (capacity and admission), do they work (reliability), and
how fast (latency, then conversation behaviour). docs/report.md "Comparing runs" says how each
verdict is reached; in short:

* **Capacity** (a capacity search's largest passing level; a plain run's observed capacity
  when both runs offered the same load) is one number per run, with no sampling distribution
  to test: a capacity that fell is a regression whatever the statistics say, and one that rose
  an improvement.
* **Proportions** (capacity rejections and failed attempts per attempt, failed and unanswered
  turns per turn, resume failures per drop; unplanned drops per admitted session, a mean of
  counts) and the behaviour rates: a **cluster bootstrap** of the difference of the pooled
  rates. Attempts, turns and trials are not independent within the unit that produced them:
  a closed-loop user (one of ``--sessions N``) rejected once retries into the same full server
  and is likely rejected again; a session whose server failed one turn is likely to fail the
  next (the same worker, the same state); a conversation's trials share a context and a voice.
  So each resample draws whole units with replacement — users for attempts (in open loop each
  arrival is its own user), sessions for turns and drops, conversations for behaviour trials —
  and pools their trials, and the interval is as wide as the spread *between* units makes it.
  A test on one rate per unit (a t-test on session rates) would weigh a 1-turn session like
  a 50-turn one; the pooled rate with whole units resampled is the very rate the report
  states, with an interval that respects the clustering, and it is the method the behaviour
  rates already used. Below ``MIN_UNITS`` units in either run a rate is shown with the note
  ``too few <units>``, never tested.
* **Percentiles** of the turns' figures: both samples resampled turn by turn (the
  percentile's sampling distribution has no simple closed form; the bootstrap needs only the
  samples turns.jsonl keeps).

Every tested comparison is in one Bonferroni family (family-wise ``FAMILY_CONFIDENCE``), so
an A/A pair flags nothing 95 % of the time however many figures are compared. A significant
change is *flagged* only when it is also at least ``MIN_CHANGE`` of the baseline (any change
from a baseline of 0). A statistic is tested only where each run has ``MIN_TAIL`` values
beyond it (``n × (1 − p) ≥ MIN_TAIL``: p50 and rates from 10, p95 from 100, p99 from 500).
The bootstrap's seed is fixed: the same two runs always give the same verdict.

The verdict (:func:`verdict`) leads with the worst regression: capacity before admission
before reliability before latency before behaviour (the order of the questions), and within
one of them the largest relative worsening. It never reads "no significant change" when a
figure changed by the minimum change or more but could not be tested (too few samples or
units): that is ``INCONCLUSIVE``, with what changed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Iterator, Mapping, Sequence
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
#: the turns' figures compared, in this order; lower is better for every one of them
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
#: admission rates, per attempt of sessions.jsonl, resampled by user; lower is better.
#: ``rejection_rate`` is their sum: testing it too would spend power on a redundant test
ADMISSION_RATES: Final = ("capacity_rejection_rate", "failure_rate")
#: reliability: per turn of turns.jsonl (the outcome), resampled by session; lower is better
TURN_RATES: Final = {"error_rate": "failed", "timeout_rate": "no_response"}
#: reliability: per admitted session of sessions.jsonl (k of n), resampled by session
SESSION_RATES: Final = {
    "resume_failure_rate": ("resume_failures", "drops"),
    "unplanned_drops_per_session": ("unplanned_drops", None),  # a mean of counts
}
RELIABILITY_RATES: Final = (*TURN_RATES, *SESSION_RATES)
#: the statistic of a rate: the mean of its 0/1 trials (or of a count per unit)
RATE: Final = "rate"
#: a rate (or behaviour figure) is resampled by whole units; fewer than this is no test
MIN_UNITS: Final = 5
#: the questions, in the order a verdict leads with them
SECTIONS: Final = ("capacity", "admission", "reliability", "latency", "behaviour")
#: what a run offers, in its config: two plain runs' observed capacities are compared only
#: when all of these are equal (else the client, not the server, set the difference)
OFFERED: Final = ("sessions", "rate", "ramp", "max_concurrency", "arrival", "burstiness")


@dataclass(frozen=True)
class Sample:
    """One figure's values in one run. ``clusters`` labels the unit each value came from
    (``unit`` names what they are: users, sessions, conversations), by which it is
    resampled; ``None``: every value is its own unit (the turns' latencies)."""

    values: np.ndarray
    clusters: np.ndarray | None = None
    unit: str | None = None

    @cached_property
    def by_value(self) -> tuple[np.ndarray, np.ndarray]:
        """The values in ascending order, and each one's unit numbered 0 … units − 1 (what a
        unit resample weighs them by); computed once, not per resample."""
        assert self.clusters is not None, "resampled value by value"
        order = np.argsort(self.values, kind="stable")
        _, owner = np.unique(self.clusters[order], return_inverse=True)
        return self.values[order], owner

    @cached_property
    def units(self) -> int:
        """How many independent units the sample holds (clusters, or values)."""
        if self.clusters is None:
            return len(self.values)
        return int(self.by_value[1].max()) + 1


class _Clustered:
    """Values of several figures collected with the unit each came from (any hashable key,
    numbered in order of appearance)."""

    def __init__(self, unit: str) -> None:
        self.unit = unit
        self._ids: dict[Hashable, int] = {}
        self._values: dict[str, list[float]] = {}
        self._owners: dict[str, list[int]] = {}

    def add(self, name: str, key: Hashable, trials: Sequence[float]) -> None:
        owner = self._ids.setdefault(key, len(self._ids))
        self._values.setdefault(name, []).extend(trials)
        self._owners.setdefault(name, []).extend([owner] * len(trials))

    def samples(self) -> dict[str, Sample]:
        return {
            name: Sample(
                np.asarray(v, dtype=float),
                np.asarray(self._owners[name], dtype=np.intp),
                self.unit,
            )
            for name, v in self._values.items()
            if v
        }


def _trials(k: int, n: int) -> list[float]:
    return [1.0] * k + [0.0] * (n - k)


def _folder(run: str | Path) -> Path:
    p = Path(run)
    return p if p.is_dir() else p.parent


def turn_samples(run: str | Path) -> tuple[Path, dict[str, Sample]]:
    """Every figure's values of a run (a --out directory, or the report.json inside one):
    the turns' latencies and outcomes after warm-up (turns.jsonl), the attempts and sessions
    (sessions.jsonl), the behaviour trials (behaviour.jsonl)."""
    folder = _folder(run)
    path = folder / "turns.jsonl"
    if not path.is_file():
        raise BadInput(
            f"{run}: no turns.jsonl beside the report (--compare needs the per-turn values a load --out directory keeps)"
        )
    values: dict[str, list[float]] = {f: [] for f in FIGURES}
    outcomes = _Clustered("sessions")
    for turn in _measured(path):
        figures = turn.get("figures") or {}
        for name in FIGURES:
            v = (figures.get(name) or {}).get("value")
            if _number(v):
                values[name].append(float(v))
        outcome = turn.get("outcome")
        if isinstance(outcome, str):
            session = (turn.get("worker"), turn.get("session"), turn.get("session_id"))
            for name, bad in TURN_RATES.items():
                outcomes.add(name, session, [float(outcome == bad)])
    samples = {k: Sample(np.asarray(v, dtype=float)) for k, v in values.items() if v}
    samples.update(outcomes.samples())
    samples.update(session_samples(folder / "sessions.jsonl"))
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


def session_samples(path: Path) -> dict[str, Sample]:
    """The admission and session rates of a run (``sessions.jsonl``: one line per attempt,
    every attempt of the run, as the report's admission figures count them; none when the
    run has no such file): each attempt's capacity rejection and failure as a 0 or a 1 by
    its user (a closed-loop user retries as ``attempt`` 2, 3 …; an open-loop arrival is its
    own user), each admitted session's drops, resume failures and unplanned drops by session.
    An attempt the run's stop abandoned (``unfinished``) is no attempt, as in the report."""
    if not path.is_file():
        return {}
    users, sessions = _Clustered("users"), _Clustered("sessions")
    for record in _measured(path):
        admission = record.get("admission")
        if not isinstance(admission, str) or admission in ("unfinished", "pending"):
            continue
        user = (record.get("worker"), record.get("index"))
        users.add("capacity_rejection_rate", user, [float(admission == "rejected_capacity")])
        users.add("failure_rate", user, [float(admission not in ("admitted", "rejected_capacity"))])
        if admission != "admitted":
            continue
        session = (*user, record.get("attempt"))
        for name, (ones, of) in SESSION_RATES.items():
            k = record.get(ones)
            if of is None:
                if _count(k):
                    sessions.add(name, session, [float(k)])
                continue
            n = record.get(of)
            if _count(k) and _count(n) and k <= n:
                sessions.add(name, session, _trials(k, n))
    return {**users.samples(), **sessions.samples()}


def behaviour_samples(path: Path) -> dict[str, Sample]:
    """Per-trial behaviour values of a run after warm-up (``behaviour.jsonl``; none when the
    run has no such file), each numbered by its conversation (its line): each time, and
    each rate as its trials' 0s and 1s."""
    if not path.is_file():
        return {}
    found = _Clustered("conversations")
    for index, conversation in enumerate(_measured(path)):
        for name in BEHAVIOUR_TIMES:
            times = conversation.get(name)
            if isinstance(times, list):
                found.add(name, index, [float(v) for v in times if _number(v)])
        for name, (ones, of) in BEHAVIOUR_RATES.items():
            k, n = conversation.get(ones), conversation.get(of)
            if _count(k) and _count(n) and k <= n:
                found.add(name, index, _trials(k, n))
    return found.samples()


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
        return ((weights @ ordered) / np.maximum(weights.sum(axis=1), 1))[np.newaxis]
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
    or whole units drawn and their trials pooled."""
    if sample.clusters is None:
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
    ``MIN_TAIL`` values beyond it and, resampled by unit, ``MIN_UNITS`` units."""
    if min(len(a.values), len(b.values)) * _tail_share(stat) < MIN_TAIL:
        return "too few samples"
    if a.clusters is not None and min(a.units, b.units) < MIN_UNITS:
        return f"too few {a.unit}"
    return None


def _is_rate(name: str) -> bool:
    return name in BEHAVIOUR_RATES or name in ADMISSION_RATES or name in RELIABILITY_RATES


def _stats_of(name: str) -> tuple[str, ...]:
    return (RATE,) if _is_rate(name) else tuple(f"p{p:g}" for p in PERCENTILES)


def section_of(name: str) -> str:
    """Which question a figure answers (:data:`SECTIONS`)."""
    if name in ("capacity", "observed_capacity"):
        return "capacity"
    if name in ADMISSION_RATES:
        return "admission"
    if name in RELIABILITY_RATES:
        return "reliability"
    if name in BEHAVIOUR_RATES or name in BEHAVIOUR_TIMES:
        return "behaviour"
    return "latency"


def is_proportion(name: str) -> bool:
    """A rate read as a percentage (every rate but a count per session)."""
    return _is_rate(name) and name != "unplanned_drops_per_session"


def compare(baseline: str | Path, candidate: str | Path) -> dict[str, Any]:
    """The comparison document (printed, ``--json``, and the HTML page)."""
    path_a, a = turn_samples(baseline)
    path_b, b = turn_samples(candidate)
    order = (*ADMISSION_RATES, *RELIABILITY_RATES, *FIGURES, *BEHAVIOUR_TIMES, *BEHAVIOUR_RATES)
    names = [n for n in order if n in a and n in b]
    untested = {
        (name, stat): _why_untested(a[name], b[name], stat)
        for name in names
        for stat in _stats_of(name)
    }
    pairs = [pair for pair, why in untested.items() if why is None]
    tested = len(pairs)
    alpha = (1 - FAMILY_CONFIDENCE) / max(tested, 1)
    rng = np.random.default_rng(SEED)
    rows = capacity_rows(_report_of(path_a.parent), _report_of(path_b.parent))
    for name in names:
        stats = _stats_of(name)
        ps = [stat for stat in stats if (name, stat) in pairs]
        diffs = _bootstrap(a[name], b[name], ps, rng) if ps else np.empty((0, 0))
        va, vb = _statistics(a[name].values, stats), _statistics(b[name].values, stats)
        clustered = a[name].clusters is not None
        for i, p in enumerate(stats):
            row = _row(name, p, float(va[i]), float(vb[i]))
            row.update(
                n_baseline=len(a[name].values),
                n_candidate=len(b[name].values),
                unit=a[name].unit,
                units_baseline=a[name].units if clustered else None,
                units_candidate=b[name].units if clustered else None,
            )
            if p in ps:
                j = ps.index(p)
                lo, hi = np.quantile(diffs[:, j], [alpha / 2, 1 - alpha / 2])
                significant = bool(lo > 0 or hi < 0)
                big = _big(row)
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
    doc: dict[str, Any] = {
        "kind": KIND,
        "baseline": str(path_a.parent),
        "candidate": str(path_b.parent),
        "method": "capacity: the numbers themselves (a fall is a regression); rates: a "
        "bootstrap of the pooled rate's difference resampling whole users, sessions or "
        "conversations; percentiles: a bootstrap over turns.jsonl's turns (docs/report.md)",
        "resamples": RESAMPLES,
        "family_confidence": FAMILY_CONFIDENCE,
        "comparisons": tested,
        "interval_confidence": 1 - alpha,
        "min_change_pct": 100 * MIN_CHANGE,
        "min_units": MIN_UNITS,
        "rows": rows,
        "flagged": [f"{r['figure']} {r['stat']}" for r in rows if r["flagged"]],
    }
    doc["verdict"] = verdict(doc)
    return doc


def _row(name: str, stat: str, baseline: float, candidate: float) -> dict[str, Any]:
    change = candidate - baseline
    return {
        "figure": name,
        "stat": stat,
        "section": section_of(name),
        "proportion": is_proportion(name),
        "baseline": baseline,
        "candidate": candidate,
        "n_baseline": None,
        "n_candidate": None,
        "unit": None,
        "units_baseline": None,
        "units_candidate": None,
        "change": change,
        "change_pct": float(100 * change / baseline) if baseline else None,
        "ci_low": None,
        "ci_high": None,
        "significant": False,
        "flagged": False,
        "worse": False,
        "note": "",
    }


def _big(row: Mapping[str, Any]) -> bool:
    """At least the minimum change of the baseline (any change from a baseline of 0)."""
    return abs(row["change"]) >= MIN_CHANGE * abs(row["baseline"]) and row["change"] != 0


def _report_of(folder: Path) -> Mapping[str, Any]:
    """A run's report.json (for its capacity figures); {} when absent or unreadable."""
    try:
        doc = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def capacity_rows(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """How many sessions each run's server held: a capacity search's largest passing level
    (none passing counts as 0), or a plain run's observed capacity when both offered the
    same load. One number per run: a fall is a regression whatever the statistics say."""
    cap_a, cap_b = a.get("capacity_search"), b.get("capacity_search")
    if cap_a and cap_b:
        row = _row(
            "capacity",
            "largest_pass",
            float(cap_a.get("largest_pass") or 0),
            float(cap_b.get("largest_pass") or 0),
        )
        notes = []
        for side, cap in (("A", cap_a), ("B", cap_b)):
            if cap.get("first_fail") is None and cap.get("largest_pass") is not None:
                notes.append(f"{side}: no failure up to its highest level (at least that)")
            if cap.get("largest_pass") is None:
                notes.append(f"{side}: no level passed (counted as 0)")
        if sorted(cap_a.get("criteria") or []) != sorted(cap_b.get("criteria") or []):
            notes.append("the runs judged their steps by different criteria")
        if cap_a.get("unit") != cap_b.get("unit"):
            notes.append(f"levels in {cap_a.get('unit')} against {cap_b.get('unit')}")
        return [_judged_level(row, notes)]
    if cap_a or cap_b:
        return []  # a search against a plain run: the search's steps are not one load
    adm_a, adm_b = a.get("admission") or {}, b.get("admission") or {}
    if "observed_capacity" not in adm_a or "observed_capacity" not in adm_b:
        return []
    row = _row(
        "observed_capacity",
        "peak",
        float(adm_a["observed_capacity"]),
        float(adm_b["observed_capacity"]),
    )
    conf_a, conf_b = a.get("config") or {}, b.get("config") or {}
    differ = [k for k in OFFERED if conf_a.get(k) != conf_b.get(k)]
    if differ:
        row["note"] = (
            "offered load differs ("
            + ", ".join(f"{k} {conf_a.get(k)} → {conf_b.get(k)}" for k in differ)
            + "): not judged"
        )
        return [row]
    return [_judged_level(row, [])]


def _judged_level(row: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    changed = row["change"] != 0
    row.update(
        significant=changed,
        flagged=changed,
        worse=row["change"] < 0,
        note="; ".join(notes),
    )
    return row


def _severity(row: Mapping[str, Any]) -> tuple[int, float]:
    """How bad a worse row is, for ordering (lower sorts first): its question, then the
    relative change (from a baseline of 0: infinite)."""
    pct = row["change_pct"]
    size = math.inf if pct is None else abs(pct)
    return SECTIONS.index(row["section"]), -size


def describe(row: Mapping[str, Any]) -> str:
    """A row in words: ``capacity_rejection_rate 0 % → 69.3 % (+69.3 points)``."""
    name = f"{row['figure']}" + (
        "" if row["stat"] in (RATE, "largest_pass", "peak") else f" {row['stat']}"
    )
    a, b = _value(row, row["baseline"]), _value(row, row["candidate"])
    if row["proportion"]:
        change = f"{100 * row['change']:+.3g} points"
    else:
        change = f"{row['change']:+.4g}" + (
            f", {row['change_pct']:+.1f} %" if row["change_pct"] is not None else ""
        )
    return f"{name} {a} → {b} ({change})"


def _value(row: Mapping[str, Any], v: float) -> str:
    if row["proportion"]:
        return f"{100 * v:.3g} %"
    if row["section"] == "capacity":
        return f"{v:g}"
    return f"{v:.4g}" + (" ms" if row["figure"].endswith("_ms") else "")


def verdict(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The one verdict of a comparison: ``word`` (REGRESSION, IMPROVED, INCONCLUSIVE, NO
    SIGNIFICANT CHANGE), ``text`` leading with the worst regression, ``worst`` its row key."""
    rows = doc["rows"]
    worse = sorted((r for r in rows if r["worse"]), key=_severity)
    better = sorted((r for r in rows if r["flagged"] and not r["worse"]), key=_severity)
    changed = [
        r
        for r in rows
        if not r["flagged"]
        and r["ci_low"] is None
        and r["note"] != ""
        and _big(r)
        and r["section"] != "capacity"
    ]
    changed.sort(key=_severity)
    if worse:
        more = f"; {len(worse) - 1} more regression(s)" if len(worse) > 1 else ""
        return {
            "word": "REGRESSION",
            "worst": f"{worse[0]['figure']} {worse[0]['stat']}",
            "text": describe(worse[0]) + more,
        }
    if better:
        return {
            "word": "IMPROVED",
            "worst": None,
            "text": describe(better[0]) + (f"; {len(better) - 1} more" if len(better) > 1 else ""),
        }
    if changed:
        return {
            "word": "INCONCLUSIVE",
            "worst": None,
            "text": "changed but not testable: "
            + ", ".join(f"{describe(r)} [{r['note']}]" for r in changed[:3])
            + (f"; {len(changed) - 3} more" if len(changed) > 3 else ""),
        }
    return {
        "word": "NO SIGNIFICANT CHANGE",
        "worst": None,
        "text": f"{doc['comparisons']} comparisons tested, none flagged",
    }


def regressions(doc: Mapping[str, Any], pct: float) -> list[dict[str, Any]]:
    """The regressions that got worse by more than ``pct`` percent of the baseline
    (``--fail-on-regression``): every kind — a capacity that fell, a rate or a percentile
    flagged worse; from a baseline of 0 any worsening is beyond every ``pct``. Worst first."""
    return sorted(
        (
            r
            for r in doc["rows"]
            if r["worse"] and (r["change_pct"] is None or abs(r["change_pct"]) > pct)
        ),
        key=_severity,
    )


def lines(doc: Mapping[str, Any]) -> list[str]:
    """The comparison as printed lines: the verdict first, then one line per figure and
    statistic, by question."""
    v = doc["verdict"]
    out = [
        f"compare: {v['word']}: {v['text']}",
        f"compare: baseline {doc['baseline']} vs candidate {doc['candidate']} "
        f"({doc['comparisons']} comparisons, {100 * doc['interval_confidence']:.2f} % bootstrap intervals, "
        f"flagged when significant and at least {doc['min_change_pct']:g} %; a capacity that fell is a regression)",
    ]
    section = None
    for r in doc["rows"]:
        if r["section"] != section:
            section = r["section"]
            out.append(f" {section}:")
        ci = ""
        if r["ci_low"] is not None:
            scale = 100 if r["proportion"] else 1
            ci = f" CI [{scale * r['ci_low']:+.4g}, {scale * r['ci_high']:+.4g}]" + (
                " points" if r["proportion"] else ""
            )
        mark = ("REGRESSION" if r["worse"] else "IMPROVEMENT") if r["flagged"] else r["note"]
        n = ""
        if r["n_baseline"] is not None:
            unit = (
                f", {r['units_baseline']}/{r['units_candidate']} {r['unit']}" if r["unit"] else ""
            )
            n = f" (n={r['n_baseline']}/{r['n_candidate']}{unit})"
        out.append(f"  {describe(r)}{n}{ci}" + (f"  {mark}" if mark else ""))
    out.append("compare: flagged: " + (", ".join(doc["flagged"]) if doc["flagged"] else "nothing"))
    return out
