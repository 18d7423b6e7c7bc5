"""--slo parsing (valid and invalid, with messages) and evaluation."""

from __future__ import annotations

import pytest

from duplexctl.report.histogram import HistogramSet
from duplexctl.report.load_report import SESSION_ORIGINS
from duplexctl.report.slo import (
    Slo,
    all_passed,
    evaluate,
    parse_slo,
    parse_slos,
)

VALID = [
    ("ttfa_p95<=800ms", "ttfa", "p95", "<=", 800.0, "ms"),
    ("turn_p99<2s", "turn", "p99", "<", 2000.0, "s"),
    ("rejection_rate<=0.01", "rejection_rate", None, "<=", 0.01, None),
    ("rejection_rate<=1%", "rejection_rate", None, "<=", 0.01, "%"),
    ("send_lag_p99<=10ms", "send_lag", "p99", "<=", 10.0, "ms"),
    ("error_rate==0", "error_rate", None, "==", 0.0, None),
    ("ttfa_p50 >= 100", "ttfa", "p50", ">=", 100.0, None),
    ("chunk_gap_max>1.5s", "chunk_gap", "max", ">", 1500.0, "s"),
    ("ttfa_mean<300ms", "ttfa", "mean", "<", 300.0, "ms"),
    ("ttfa_min>-200ms", "ttfa", "min", ">", -200.0, "ms"),
    ("rtf_p95<1", "rtf", "p95", "<", 1.0, None),
    ("TTFA_P90<=0.5S", "ttfa", "p90", "<=", 500.0, "s"),
    ("ttfa_ms_p99.9<=1e3ms", "ttfa_ms", "p99.9", "<=", 1000.0, "ms"),
    ("observed_capacity>=8", "observed_capacity", None, ">=", 8.0, None),
]


@pytest.mark.parametrize(("expr", "metric", "stat", "op", "threshold", "unit"), VALID)
def test_parse_valid(
    expr: str, metric: str, stat: str | None, op: str, threshold: float, unit: str | None
) -> None:
    slo = parse_slo(expr)
    assert (slo.metric, slo.stat, slo.op, slo.unit) == (metric, stat, op, unit)
    assert slo.threshold == pytest.approx(threshold)
    assert slo.expr == expr.strip()


INVALID = [
    ("", "empty SLO expression"),
    ("   ", "empty SLO expression"),
    ("ttfa_p95", "no comparison operator"),
    ("ttfa_p95=800ms", "use '==' for equality"),
    ("ttfa_p95!=800ms", "unsupported operator '!='"),
    ("<=800ms", "expected <metric>_<stat> or a rate"),
    ("ttfa p95<=800ms", "expected <metric>_<stat> or a rate"),
    ("ttfa_p95<=fast", "threshold 'fast' is not a number"),
    ("ttfa_p95<=", "threshold '' is not a number"),
    ("ttfa_p95<=800kg", "unknown unit 'kg'"),
    ("ttfa_median<=800ms", "unknown statistic 'median' of ttfa"),
    ("tffa_p95<=800ms", "unknown metric 'tffa'"),
    ("rejection_ratio<=0.01", "unknown metric 'rejection_ratio'"),
    ("ttfa_p101<=800ms", "p101 is not a percentile"),
    ("rtf_p95<1s", "rtf_p95 is not a time"),
    ("rejection_rate<=5ms", "rejection_rate is not a time"),
    ("ttfa_p95<=50%", "% applies to rates"),
    ("observed_capacity>=50%", "% applies to rates"),
]


@pytest.mark.parametrize(("expr", "message"), INVALID)
def test_parse_invalid(expr: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_slo(expr)
    text = str(info.value)
    assert message in text
    assert "\n" not in text  # one line for the CLI's exit-2 message
    if expr.strip():
        assert repr(expr.strip()) in text  # names the offending expression


def test_parse_without_registry_accepts_any_name() -> None:
    slo = parse_slo("custom_p95<=3ms", histogram_metrics=None, scalar_metrics=None)
    assert (slo.metric, slo.stat, slo.threshold) == ("custom", "p95", 3.0)
    assert parse_slo("my_count>=2", histogram_metrics=None, scalar_metrics=None).stat is None


def figures() -> HistogramSet:
    hs = HistogramSet()
    for v in range(1, 1001):
        hs.record("ttfa_ms", float(v))  # p95 = 950, p99 = 990
    for v in range(50):
        hs.record("turn_ms", 1000.0 + v)
    for v in (0.5, 0.6, 0.9):
        hs.record("rtf", v)
    return hs


def test_evaluate_passes_and_fails() -> None:
    slos = parse_slos(
        [
            "ttfa_p95<=960ms",
            "ttfa_p95<900ms",
            "ttfa_p99<=1s",
            "turn_p99<2s",
            "rtf_max<1",
            "rejection_rate<=1%",
            "error_rate==0",
        ]
    )
    results = evaluate(slos, figures(), {"rejection_rate": 0.02, "error_rate": 0.0})
    verdicts = {r.expr: r.passed for r in results}
    assert verdicts == {
        "ttfa_p95<=960ms": True,
        "ttfa_p95<900ms": False,
        "ttfa_p99<=1s": True,
        "turn_p99<2s": True,
        "rtf_max<1": True,
        "rejection_rate<=1%": False,
        "error_rate==0": True,
    }
    by_expr = {r.expr: r for r in results}
    assert by_expr["ttfa_p95<=960ms"].actual == pytest.approx(950.0, rel=1e-3)
    assert by_expr["ttfa_p95<=960ms"].n == 1000
    assert by_expr["turn_p99<2s"].low_n is True  # n=50
    assert by_expr["ttfa_p99<=1s"].low_n is False
    assert not all_passed(results)
    assert by_expr["rejection_rate<=1%"].describe() == "FAIL rejection_rate<=1%: 2%"
    assert by_expr["ttfa_p99<=1s"].describe().startswith("PASS ttfa_p99<=1s: 0.99")
    assert "fewer than 100" in by_expr["turn_p99<2s"].describe()


def test_evaluate_no_samples_fails() -> None:
    results = evaluate(parse_slos(["cancel_ack_p95<=200ms", "rejection_rate<=0.01"]), figures(), {})
    assert [(r.passed, r.actual, r.reason) for r in results] == [
        (False, None, "no samples"),
        (False, None, "no samples"),
    ]
    assert "no samples" in results[0].describe()


def test_evaluate_unknown_metric_is_a_clear_error() -> None:
    slo = parse_slo("custom_p95<=3ms", histogram_metrics=None, scalar_metrics=None)
    with pytest.raises(ValueError, match=r"unknown metric 'custom' \(this run has: .*ttfa_ms"):
        evaluate([slo], figures(), {"rejection_rate": 0.0})
    present = HistogramSet()
    present.record("custom_ms", 2.0)
    assert evaluate([slo], present)[0].passed


def test_every_figure_load_headlines_can_be_gated() -> None:
    """load's report defines an origin for each figure it adds to replay's; an SLO naming
    any of them must parse (the coordinated-omission-corrected ``ttfa_with_queue`` once
    could not)."""
    for metric in SESSION_ORIGINS:
        unit = "ms" if metric.endswith("_ms") else ""  # rtf figures are ratios
        assert parse_slo(f"{metric.removesuffix('_ms')}_p99<=1{unit}").metric
    hs = HistogramSet()
    for v in (100.0, 200.0, 1500.0):
        hs.record("ttfa_with_queue_ms", v)
        hs.record("turn_with_queue_ms", v + 1000)
    results = evaluate(parse_slos(["ttfa_with_queue_max<=1s", "turn_with_queue_p50<=1.5s"]), hs)
    assert [(r.passed, r.actual) for r in results] == [
        (False, pytest.approx(1500.0, rel=1e-3)),
        (True, pytest.approx(1200.0, rel=1e-3)),
    ]


def test_slo_holds_operators() -> None:
    def slo(op: str) -> Slo:
        return Slo(expr="x", metric="x", stat=None, op=op, threshold=1.0, unit=None)

    assert slo("<=").holds(1.0) and not slo("<").holds(1.0)
    assert slo(">=").holds(1.0) and not slo(">").holds(1.0)
    assert slo("==").holds(1.0) and not slo("==").holds(1.5)
