"""``--slo`` thresholds: parse ``ttfa_p95<=800ms``-style expressions and judge a run by them.

Like k6 thresholds, an SLO turns a load run into a pass/fail verdict a CI job can gate on
(a failed SLO exits 1). Expressions are parsed *before* the run so a typo costs an exit 2
with a one-line message, not a ten-minute run that then cannot be judged.

Grammar (whitespace around the operator is allowed, names are case-insensitive)::

    slo       := lhs op number [unit]
    lhs       := metric "_" stat        # a statistic of a histogram figure
               | scalar                 # a run-level figure: rejection_rate, error_rate, …
    stat      := "p" number | "max" | "mean" | "min"     # p50, p95, p99, p99.9, …
    op        := "<=" | "<" | ">=" | ">" | "=="
    unit      := "ms" | "s" | "%"

``metric`` may be given with or without its ``_ms`` suffix: ``ttfa_p95`` reads the
``ttfa_ms`` histogram, ``rtf_p95`` the ``rtf`` one. Thresholds are normalised to the figure's
own unit: time to milliseconds (``2s`` = 2000), percentages to fractions (``1%`` = 0.01).
A time figure without a unit is taken as milliseconds. ``%`` is only for rates and ``ms``/``s``
only for time figures; mixing them is an error, not a silent guess.

A figure with no samples fails its SLO (``actual`` None, reason "no samples"): a run where
every session was rejected has no ttfa, and must not pass ``ttfa_p95<=800ms`` by default.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from duplexctl.report.histogram import P99_MIN_N, RATIO_METRICS, HistogramSet

#: Histogram figures of docs/metrics.md (and the load generator's own validity figures), in the
#: order reports show them.
HISTOGRAM_METRICS_IN_ORDER: tuple[str, ...] = (
    "ttfa_ms",
    "ttft_ms",
    "first_audible_ms",
    "turn_ms",
    "ttfa_commit_ms",
    "ttfa_created_ms",
    "rtf",
    "rtf_omni",
    "chunk_gap_ms",
    "stall_ms",
    "audio_underrun_ms",
    "session_rtf",
    "cancel_ack_ms",
    "model_stop_ms",
    "audio_stop_ms",
    "leaked_audio_ms",
    "heard_stop_ms",
    "post_interrupt_ttfa_ms",
    "join_ttfa_ms",
    "join_handshake_ms",
    "join_turn_ms",
    "tool_call_ms",
    "tool_answer_text_ms",
    "tool_answer_audio_ms",
    "task_ms",
    "stop_latency_ms",
    "response_gap_ms",
    "resume_ms",
    "reconnect_ms",
    "resume_handshake_ms",
    "audio_gap_ms",
    "connect_ms",
    "handshake_ms",
    "time_to_reject_ms",
    "close_ms",
    "slot_release_ms",
    "heartbeat_rtt_ms",
    "client_queue_ms",
    "ttfa_with_queue_ms",
    "turn_with_queue_ms",
    "send_lag_ms",
    "loop_lag_ms",
)
HISTOGRAM_METRICS: frozenset[str] = frozenset(HISTOGRAM_METRICS_IN_ORDER)

#: Run-level scalar figures an SLO may name directly.
SCALAR_METRICS: frozenset[str] = frozenset(
    {
        "rejection_rate",
        "capacity_rejection_rate",
        "failure_rate",
        "error_rate",
        "timeout_rate",
        "early_start_rate",
        "barge_in_success_rate",
        "false_barge_rate",
        "observed_capacity",
        "advertised_limit",
        "audio_throughput",
        "underruns",
        "violations",
        "seq_gaps",
        "drops",
        "unplanned_drops",
        "resumes",
        "resume_failures",
        "client_cpu_percent",
        "takeover_rate",
        "no_response_rate",
        "backchannels_per_min",
        # audio continuity (report/continuity.py): the OK rate at each default threshold (any
        # other --continuity-thresholds value T is continuity_ok_rate_T), sessions with RTF < 1
        "continuity_ok_rate_50",
        "continuity_ok_rate_100",
        "continuity_ok_rate_200",
        "session_rtf_below_1_rate",
        # frame accounting (report/frames.py): frames received / frames sent over all
        # sessions, and the largest deficit one session ended with
        "frame_coverage",
        "frame_deficit_max",
    }
)
#: the OK rate at any continuity threshold (``continuity_ok_rate_<T>``, T in ms)
CONTINUITY_RATE = re.compile(r"^continuity_ok_rate_\d+$")


def known_scalar(name: str) -> bool:
    """A run-level figure an SLO may name: :data:`SCALAR_METRICS` or a continuity OK rate."""
    return name in SCALAR_METRICS or CONTINUITY_RATE.match(name) is not None


OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
}
NAMED_STATS = ("max", "mean", "min")
UNITS = ("ms", "s", "%")

_SPLIT = re.compile(r"^(?P<lhs>[^<>=!]*)(?P<op>[<>=!]=?)(?P<rhs>.*)$")
_LHS = re.compile(r"^[a-z][a-z0-9_.]*$")
_STAT = re.compile(r"^(?P<metric>[a-z][a-z0-9_]*?)_(?P<stat>p\d+(?:\.\d+)?|max|mean|min)$")
_RHS = re.compile(r"^(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?)\s*(?P<unit>\S*)$")
_EXAMPLE = "e.g. ttfa_p95<=800ms or rejection_rate<=0.01"


@dataclass(frozen=True, slots=True)
class Slo:
    """One parsed threshold.

    ``stat`` is ``None`` for a scalar figure. ``threshold`` is in the figure's own unit
    (ms for time figures, a fraction for ``%``); ``unit`` is what the user wrote, kept for
    display.
    """

    expr: str
    metric: str
    stat: str | None
    op: str
    threshold: float
    unit: str | None

    @property
    def percentile(self) -> float | None:
        return float(self.stat[1:]) if self.stat and self.stat.startswith("p") else None

    def holds(self, actual: float) -> bool:
        return OPERATORS[self.op](actual, self.threshold)


@dataclass(frozen=True, slots=True)
class SloResult:
    """The verdict on one SLO. ``actual`` is in the figure's own unit; None without data."""

    expr: str
    actual: float | None
    passed: bool
    n: int | None = None
    low_n: bool = False  # a p99 (or higher) from fewer than 100 samples
    reason: str = ""
    slo: Slo | None = None

    def describe(self) -> str:
        """One line for the terminal, e.g. ``PASS ttfa_p95<=800ms: 742ms (n=1200)``."""
        verdict = "PASS" if self.passed else "FAIL"
        actual = "no samples" if self.actual is None else _display(self.actual, self.slo)
        extra = []
        if self.n is not None:
            extra.append(f"n={self.n}")
        if self.low_n:
            extra.append(f"p99 from fewer than {P99_MIN_N} samples")
        if self.reason and self.actual is not None:
            extra.append(self.reason)
        tail = f" ({', '.join(extra)})" if extra else ""
        return f"{verdict} {self.expr}: {actual}{tail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "expr": self.expr,
            "actual": self.actual,
            "passed": self.passed,
            "n": self.n,
            "low_n": self.low_n,
            "reason": self.reason,
        }


def _display(actual: float, slo: Slo | None) -> str:
    unit = slo.unit if slo else None
    if unit == "s":
        return f"{actual / 1000:g}s"
    if unit == "%":
        return f"{actual * 100:g}%"
    if unit == "ms" or (slo is not None and slo.stat is not None and _is_time(slo.metric)):
        return f"{actual:g}ms"
    return f"{actual:g}"


def _is_time(metric: str) -> bool:
    return metric.endswith("_ms") or metric + "_ms" in HISTOGRAM_METRICS


def _histogram_candidates(metric: str) -> tuple[str, ...]:
    return (metric,) if metric.endswith("_ms") else (metric, metric + "_ms")


def _short(names: Iterable[str]) -> str:
    return ", ".join(sorted(n.removesuffix("_ms") for n in names))


def parse_slo(
    expr: str,
    *,
    histogram_metrics: Iterable[str] | None = HISTOGRAM_METRICS,
    scalar_metrics: Iterable[str] | None = SCALAR_METRICS,
) -> Slo:
    """Parse one ``--slo`` expression; ``ValueError`` with a one-line message if it is bad.

    Names are checked against ``histogram_metrics`` / ``scalar_metrics`` (docs/metrics.md by
    default) so a misspelt metric fails before the run; pass ``None`` for both to accept any
    well-formed name.
    """
    text = expr.strip()
    if not text:
        raise ValueError("empty SLO expression (" + _EXAMPLE + ")")
    where = f"SLO {text!r}"
    split = _SPLIT.match(text)
    if split is None:
        raise ValueError(f"{where}: no comparison operator (use <=, <, >=, > or ==)")
    lhs, op, rhs = split["lhs"].strip().lower(), split["op"], split["rhs"].strip()
    if op == "=":
        raise ValueError(f"{where}: '=' is not an operator, use '==' for equality")
    if op not in OPERATORS:
        raise ValueError(f"{where}: unsupported operator {op!r} (use <=, <, >=, > or ==)")
    if not _LHS.match(lhs):
        raise ValueError(
            f"{where}: expected <metric>_<stat> or a rate before {op!r}, got {lhs!r} ({_EXAMPLE})"
        )
    value_match = _RHS.match(rhs.lower())
    if value_match is None:
        raise ValueError(f"{where}: threshold {rhs!r} is not a number with an optional unit")
    threshold = float(value_match["num"])
    unit = value_match["unit"] or None
    if unit is not None and unit not in UNITS:
        raise ValueError(f"{where}: unknown unit {unit!r} (use ms, s or %)")

    hists = None if histogram_metrics is None else frozenset(histogram_metrics)
    scalars = None if scalar_metrics is None else frozenset(scalar_metrics)
    stat_match = _STAT.match(lhs)
    listed = scalars is not None and (lhs in scalars or CONTINUITY_RATE.match(lhs) is not None)
    is_scalar = listed or stat_match is None
    if is_scalar:
        metric, stat = lhs, None
        base, _, tail = lhs.rpartition("_")
        if (
            not listed
            and hists is not None
            and base
            and any(c in hists for c in _histogram_candidates(base))
        ):
            raise ValueError(
                f"{where}: unknown statistic {tail!r} of {base} "
                "(use p50, p90, p95, p99, pNN, max, mean or min)"
            )
        if scalars is not None and not listed:
            known = "" if hists is None else f"histograms: {_short(hists)}; "
            raise ValueError(
                f"{where}: unknown metric {metric!r} ({known}stats: p50, p90, p95, p99, "
                f"max, mean, min; rates and counts: {', '.join(sorted(scalars))})"
            )
    else:
        assert stat_match is not None
        metric, stat = stat_match["metric"], stat_match["stat"]
        if hists is not None and not any(c in hists for c in _histogram_candidates(metric)):
            raise ValueError(f"{where}: unknown metric {metric!r} (histograms: {_short(hists)})")
        if stat.startswith("p") and not 0 <= float(stat[1:]) <= 100:
            raise ValueError(f"{where}: {stat} is not a percentile (p0 .. p100)")

    time_figure = metric.endswith("_ms") or (stat is not None and metric not in RATIO_METRICS)
    if unit in ("ms", "s"):
        if not time_figure:
            raise ValueError(f"{where}: {lhs} is not a time, it takes no ms/s unit")
        if unit == "s":
            threshold *= 1000.0
    elif unit == "%":
        if stat is not None or not (metric.endswith("_rate") or CONTINUITY_RATE.match(metric)):
            raise ValueError(f"{where}: % applies to rates (…_rate), not to {lhs}")
        threshold /= 100.0
    return Slo(expr=text, metric=metric, stat=stat, op=op, threshold=threshold, unit=unit)


def parse_slos(exprs: Iterable[str], **kwargs: Any) -> list[Slo]:
    """Parse every repeated ``--slo``; the first bad one raises."""
    return [parse_slo(e, **kwargs) for e in exprs]


def evaluate(
    slos: Iterable[Slo],
    histograms: HistogramSet | None = None,
    scalars: Mapping[str, float | None] | None = None,
) -> list[SloResult]:
    """Judge each SLO against a run's figures.

    A figure absent from the run but known to docs/metrics.md fails with "no samples"; a name that
    is neither present nor known raises ``ValueError`` naming it and the figures available, since
    no run could ever satisfy it.
    """
    hists = histograms if histograms is not None else HistogramSet()
    values = dict(scalars or {})
    results = []
    for slo in slos:
        if slo.stat is None:
            results.append(_evaluate_scalar(slo, values, hists))
        else:
            results.append(_evaluate_stat(slo, hists, values))
    return results


def all_passed(results: Iterable[SloResult]) -> bool:
    return all(r.passed for r in results)


def _unknown(slo: Slo, hists: HistogramSet, values: Mapping[str, Any]) -> ValueError:
    available = sorted(set(hists.names()) | set(values))
    return ValueError(
        f"SLO {slo.expr!r}: unknown metric {slo.metric!r} "
        f"(this run has: {', '.join(available) or 'no figures'})"
    )


def _evaluate_scalar(
    slo: Slo, values: Mapping[str, float | None], hists: HistogramSet
) -> SloResult:
    if slo.metric not in values and not known_scalar(slo.metric):
        raise _unknown(slo, hists, values)
    actual = values.get(slo.metric)
    if actual is None:
        return SloResult(slo.expr, None, False, reason="no samples", slo=slo)
    return SloResult(slo.expr, float(actual), slo.holds(float(actual)), slo=slo)


def _evaluate_stat(slo: Slo, hists: HistogramSet, values: Mapping[str, Any]) -> SloResult:
    candidates = _histogram_candidates(slo.metric)
    hist = next((hists[c] for c in candidates if c in hists), None)
    if hist is None:
        if not any(c in HISTOGRAM_METRICS for c in candidates):
            raise _unknown(slo, hists, values)
        return SloResult(slo.expr, None, False, n=0, reason="no samples", slo=slo)
    n = hist.count
    if n == 0:
        return SloResult(slo.expr, None, False, n=0, reason="no samples", slo=slo)
    p = slo.percentile
    if p is not None:
        actual = hist.percentile(p)
    elif slo.stat == "max":
        actual = hist.max
    elif slo.stat == "min":
        actual = hist.min
    else:
        actual = hist.mean
    assert actual is not None
    low_n = p is not None and p >= 99 and n < P99_MIN_N
    return SloResult(slo.expr, actual, slo.holds(actual), n=n, low_n=low_n, slo=slo)
