"""LatencyHistogram / HistogramSet: exact merge, lossless encoding, signed values."""

from __future__ import annotations

import gc
import random
from collections import Counter

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hypothesis import given, settings
from hypothesis import strategies as st

from duplexctl.report.histogram import (
    HIGHEST_TRACKABLE,
    RATIO_SCALE,
    HistogramSet,
    LatencyHistogram,
    SparseCounts,
    scale_for,
)

PS = (0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 100)
ms_values = st.floats(min_value=-5_000, max_value=600_000, allow_nan=False, allow_infinity=False)


def hist_of(values: list[float]) -> LatencyHistogram:
    h = LatencyHistogram()
    h.record_many(values)
    return h


def test_split_then_merged_equals_recorded_whole() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(5.5, 0.6) for _ in range(5000)] + [
        -rng.random() * 80 for _ in range(50)
    ]
    whole = hist_of(values)
    parts = [hist_of(values[i::4]) for i in range(4)]
    merged = LatencyHistogram()
    for part in parts:
        merged.merge(part)
    assert merged == whole
    assert merged.bucket_counts() == whole.bucket_counts()
    assert merged.percentiles(PS) == whole.percentiles(PS)
    assert merged.to_dict() == whole.to_dict()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(ms_values, max_size=60),
    st.lists(ms_values, max_size=60),
    st.lists(ms_values, max_size=60),
)
def test_merge_is_exact_associative_commutative(
    a: list[float], b: list[float], c: list[float]
) -> None:
    ha, hb, hc = hist_of(a), hist_of(b), hist_of(c)
    left = ha.copy().merge(hb).merge(hc)
    right = ha.copy().merge(hb.copy().merge(hc))
    swapped = hc.copy().merge(ha).merge(hb)
    whole = hist_of(a + b + c)
    assert left == right == swapped == whole
    assert left.percentiles(PS) == whole.percentiles(PS)
    assert (left.min, left.max, left.mean, left.count) == (
        whole.min,
        whole.max,
        whole.mean,
        whole.count,
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(ms_values, min_size=1, max_size=200))
def test_percentiles_within_hdr_precision_of_exact(values: list[float]) -> None:
    h = hist_of(values)
    data = sorted(round(v * 1000) / 1000 for v in values)
    n = len(data)
    for p in (50, 90, 99):
        rank = max(1, int(p * n / 100 + 0.5))
        exact = data[rank - 1]
        got = h.percentile(p)
        assert got is not None
        # 3 significant digits: bucket width <= 0.1 % of the magnitude (and >= 1 µs).
        assert abs(got - exact) <= abs(exact) * 1e-3 + 1e-3
    assert h.min is not None and abs(h.min - data[0]) <= abs(data[0]) * 1e-3 + 1e-3
    assert h.max is not None and abs(h.max - data[-1]) <= abs(data[-1]) * 1e-3 + 1e-3


def test_encode_decode_round_trip_with_and_without_negatives() -> None:
    positive = hist_of([1.5, 20.25, 300.0, 300.0, 4000.0])
    text = positive.encode()
    assert "|" not in text and text.startswith("HIST")
    assert LatencyHistogram.decode(text) == positive

    signed = hist_of([-250.0, -0.5, 0.0, 0.0004, 12.0, 900.0])
    text = signed.encode()
    assert text.count("|") == 1
    back = LatencyHistogram.decode(text)
    assert back == signed
    assert back.to_dict() == signed.to_dict()
    assert back.negative_count == 2

    empty = LatencyHistogram()
    assert LatencyHistogram.decode(empty.encode()).count == 0


def test_decode_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not an encoded histogram"):
        LatencyHistogram.decode("not base64 at all!")
    with pytest.raises(ValueError, match="not an encoded histogram"):
        LatencyHistogram.decode("")


def test_negative_values_order_before_positive() -> None:
    h = hist_of([-300.0, -100.0, -5.0, 10.0, 200.0])
    assert h.count == 5
    assert h.negative_count == 3
    assert h.min == pytest.approx(-300.0, rel=1e-3)
    assert h.max == pytest.approx(200.0, rel=1e-3)
    assert h.percentile(20) == pytest.approx(-300.0, rel=1e-3)
    assert h.percentile(40) == pytest.approx(-100.0, rel=1e-3)
    assert h.percentile(50) == pytest.approx(-5.0, rel=1e-3)
    assert h.percentile(80) == pytest.approx(10.0, rel=1e-3)
    assert h.mean == pytest.approx(np.mean([-300, -100, -5, 10, 200]), abs=0.5)
    only_negative = hist_of([-3.0, -1.0])
    assert only_negative.max == pytest.approx(-1.0, rel=1e-3)
    assert only_negative.min == pytest.approx(-3.0, rel=1e-3)


def test_sub_millisecond_precision_and_zero() -> None:
    h = hist_of([0.001, 0.25, 0.0])
    assert h.min == 0.0
    assert h.percentile(50) == pytest.approx(0.001)
    assert h.max == pytest.approx(0.25, rel=1e-3)


def test_values_beyond_one_hour_saturate() -> None:
    h = hist_of([10.0, 5 * 3_600_000.0])
    assert h.count == 2
    assert h.max == pytest.approx(HIGHEST_TRACKABLE / 1000, rel=1e-3)


def test_non_finite_values_are_refused() -> None:
    h = LatencyHistogram()
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValueError, match="non-finite"):
            h.record(bad)
    assert h.count == 0


def test_to_dict_marks_low_n_p99() -> None:
    small = hist_of([float(i) for i in range(42)])
    summary = small.to_dict()
    assert summary["n"] == 42
    assert summary["p99_low_n"] is True
    assert set(summary) == {"n", "p50", "p90", "p95", "p99", "max", "mean", "min", "p99_low_n"}
    big = hist_of([float(i) for i in range(100)])
    assert big.to_dict()["p99_low_n"] is False
    empty = LatencyHistogram().to_dict()
    assert empty["n"] == 0 and empty["p50"] is None and empty["max"] is None


def test_ratio_scale_keeps_small_ratios() -> None:
    assert scale_for("rtf") == RATIO_SCALE
    assert scale_for("ttfa_ms") == 1000
    h = LatencyHistogram(scale_for("rtf"))
    h.record_many([0.0123, 0.5, 1.7])
    assert h.min == pytest.approx(0.0123, rel=1e-3)
    assert h.max == pytest.approx(1.7, rel=1e-3)


def test_merge_refuses_different_scales() -> None:
    with pytest.raises(ValueError, match="scale"):
        LatencyHistogram(1000).merge(LatencyHistogram(RATIO_SCALE))


def test_histogram_set_merge_encode_decode() -> None:
    rng = random.Random(3)
    rows = [
        {
            "ttfa_ms": rng.gauss(300, 80),
            "turn_ms": rng.gauss(2000, 300),
            "rtf": rng.uniform(0.3, 1.2),
        }
        for _ in range(400)
    ]
    for row in rows[::10]:
        row["ttfa_ms"] = -abs(row["ttfa_ms"])  # some early starts
    whole = HistogramSet()
    for row in rows:
        whole.record_figures(row)
    a, b = HistogramSet(), HistogramSet()
    for i, row in enumerate(rows):
        (a if i % 3 else b).record_figures({**row, "cancel_ack_ms": None})
    merged = a.copy().merge(b)
    assert merged == whole
    assert "cancel_ack_ms" not in merged  # None means "not applicable", never recorded
    assert merged["rtf"].scale == RATIO_SCALE

    encoded = merged.encode()
    assert set(encoded) == {"ttfa_ms", "turn_ms", "rtf"}
    assert encoded["rtf"]["scale"] == RATIO_SCALE
    decoded = HistogramSet.decode(encoded)
    assert decoded == whole
    assert decoded.to_dict() == whole.to_dict()
    # merging a decoded set into an empty one keeps the decoded scale
    assert HistogramSet().merge(decoded) == whole


def test_histogram_set_decode_names_bad_metric() -> None:
    with pytest.raises(ValueError, match="'ttfa_ms'"):
        HistogramSet.decode({"ttfa_ms": {"scale": 1000, "hdr": "garbage"}})
    with pytest.raises(ValueError, match="'turn_ms'"):
        HistogramSet.decode({"turn_ms": {"hdr": LatencyHistogram().encode()}})


def test_encoding_is_plain_hdr_readable_by_hdrh() -> None:
    from hdrh.histogram import HdrHistogram

    values = [0.2, 1.5, 20.25, 300.0, 300.0, 4000.0, 61_000.0]
    ours = hist_of(values)
    dense = HdrHistogram(1, 3_600_000_000, 3)
    for v in values:
        dense.record_value(round(v * 1000))
    assert ours.encode() == dense.encode().decode("ascii")
    back = HdrHistogram.decode(ours.encode())
    assert back.get_total_count() == len(values)
    assert back.get_value_at_percentile(50) == round(ours.percentile(50) * 1000)  # type: ignore[operator]


def test_decode_rebuckets_a_foreign_hdr_layout() -> None:
    from hdrh.histogram import HdrHistogram

    foreign = HdrHistogram(1, 60_000_000, 2)  # 2 significant digits, 1 minute
    for us in (1500, 250_000, 250_000, 3_000_000):
        foreign.record_value(us)
    hist = LatencyHistogram.decode(foreign.encode().decode("ascii"))
    assert hist.count == 4
    assert hist.percentile(50) == pytest.approx(250.0, rel=0.01)
    assert hist.max == pytest.approx(3000.0, rel=0.01)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.integers(0, 23_551), st.integers(1, 2**40)),  # one record
            st.lists(st.integers(0, 23_551), max_size=400),  # a batch (repeats allowed)
        ),
        max_size=40,
    )
)
def test_sparse_counts_equal_a_counter_whatever_the_order_of_adds(ops: list[object]) -> None:
    """Single records wait in a dict and batches join the sorted arrays directly; every
    mix of the two, folded at any point, is exactly a Counter of what was added."""
    counts, reference = SparseCounts(), Counter[int]()
    for op in ops:
        if isinstance(op, tuple):
            counts.add(*op)
            reference[op[0]] += op[1]
        else:
            counts.add_all(SparseCounts.of(np.array(op, dtype=np.int64)))
            reference.update(op)
    indices, n = counts.arrays()
    assert list(zip(indices.tolist(), n.tolist(), strict=True)) == sorted(reference.items())
    assert counts.total() == sum(reference.values())


def test_encoding_and_decoding_leave_no_dense_hdr_histogram_behind() -> None:
    """hdrh's histogram and its encoder refer to each other: each encode or decode used to
    leave a ~190 kB dense counts array for the cyclic collector (tens of MB when a run's
    slices are encoded at its end, issue 16.5). They are freed as soon as they are used."""
    h = hist_of([0.5, 12.0, 900.0, -3.0])
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            assert LatencyHistogram.decode(h.encode()) == h
        left = sum(isinstance(o, HdrHistogram) for o in gc.get_objects())
    finally:
        gc.enable()
    assert left == 1  # the module's read-only layout, nothing else
