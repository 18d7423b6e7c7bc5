"""An HDR histogram as a Prometheus native histogram, or as a summary of percentiles.

Native histograms (Prometheus's exponential histograms) have buckets whose bounds grow by a
factor of ``2^(2^-schema)``: bucket ``i`` holds the values in ``(2^((i-1)/2^schema),
2^(i/2^schema)]``, negative values mirrored, exact zeros in the zero bucket. The report's HDR
histograms have far finer buckets (3 significant digits), so each HDR bucket goes whole into
the native bucket holding its midpoint: the count is exact (it equals the report's ``n``),
a native bucket's share may differ from the exact one only by the samples of an HDR bucket
that straddles its bound (0.1 % wide), and the sum is the sum of HDR bucket midpoints (HDR's
mean convention: within 0.1 % of the exact sum).

:data:`SCHEMA` 5 (bucket bounds 2.2 % apart) keeps a PromQL ``histogram_quantile`` within
about 1 % of the report's percentile; a latency from 1 ms to 10 s spans at most 426 buckets,
of which a run fills far fewer.

Where the receiver takes no native histograms, :func:`percentiles` gives what k6 calls trend
stats: chosen percentiles of the same HDR histogram, computed exactly as the report computes
them, beside its count and sum.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final

import numpy as np

from duplexctl.report.histogram import COUNTS_LEN, LatencyHistogram, bounds_of

SCHEMA: Final = 5
#: Prometheus's default zero threshold (2^-128): only exact zeros go in the zero bucket
ZERO_THRESHOLD: Final = 2.938735877055719e-39
#: the summary fallback's quantiles → the report's percentiles (docs/metrics.md "Statistics")
QUANTILES: Final = {0.5: 50.0, 0.9: 90.0, 0.95: 95.0, 0.99: 99.0}


@dataclass(frozen=True, slots=True)
class NativeHistogram:
    """The fields of a remote-write ``Histogram`` (integer counts, delta-encoded)."""

    count: int
    sum: float
    zero_count: int
    positive_spans: list[tuple[int, int]]
    positive_deltas: list[int]
    negative_spans: list[tuple[int, int]]
    negative_deltas: list[int]
    schema: int = SCHEMA
    zero_threshold: float = ZERO_THRESHOLD


#: a histogram before its first sample (what a new series starts from: rates count from it)
EMPTY: Final = NativeHistogram(0, 0.0, 0, [], [], [], [])


def native(hist: LatencyHistogram, to_base: float = 1.0) -> NativeHistogram:
    """``hist`` (values × ``to_base`` = the base unit) as a native histogram.

    Every HDR bucket's native bucket comes from a table made once per (scale, unit): a push
    converts a few dozen histograms every few seconds, in the push thread, and a numpy pass
    per bucket array there would hold the GIL away from the event loop longer than needed."""
    pos_i, pos_n, neg_i, neg_n = hist.sparse()
    index, mids = _table(hist.scale, to_base)
    zero = int(pos_n[0]) if pos_i.size and pos_i[0] == 0 else 0
    if zero:
        pos_i, pos_n = pos_i[1:], pos_n[1:]
    total = float(np.dot(mids[pos_i], pos_n) - np.dot(mids[neg_i], neg_n))
    pos_spans, pos_deltas = _grouped(index[pos_i], pos_n)
    neg_spans, neg_deltas = _grouped(index[neg_i], neg_n)
    return NativeHistogram(
        count=int(pos_n.sum() + neg_n.sum()) + zero,
        sum=total,
        zero_count=zero,
        positive_spans=pos_spans,
        positive_deltas=pos_deltas,
        negative_spans=neg_spans,
        negative_deltas=neg_deltas,
    )


@functools.cache
def _table(scale: int, to_base: float) -> tuple[np.ndarray, np.ndarray]:
    """For every HDR counts index: its native bucket index and its bucket's midpoint in the
    base unit (index 0, the value 0, has no native bucket: it is the zero bucket)."""
    lows, highs = bounds_of(np.arange(COUNTS_LEN, dtype=np.int64))
    mids = (lows + highs) / 2.0 / scale * to_base
    index = np.zeros(COUNTS_LEN, dtype=np.int64)
    index[1:] = bucket_index(mids[1:])
    return index, mids


def bucket_index(values: np.ndarray) -> np.ndarray:
    """The native bucket index of each positive value: ``ceil(log2(v) * 2^schema)``."""
    return np.ceil(np.log2(values) * (1 << SCHEMA)).astype(np.int64)


def _grouped(index: np.ndarray, counts: np.ndarray) -> tuple[list[tuple[int, int]], list[int]]:
    """Spans ``(offset, length)`` and delta-encoded counts of native bucket indices given in
    ascending order (HDR's order is the values', so theirs is too), one per HDR bucket."""
    if index.size == 0:
        return [], []
    starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
    found = index[starts]
    summed = np.add.reduceat(counts, starts)
    breaks = np.flatnonzero(np.diff(found) != 1) + 1
    first = np.r_[0, breaks].tolist()
    last = np.r_[breaks, found.size].tolist()
    spans = []
    previous_end = None
    for a, b in zip(first, last, strict=True):
        offset = int(found[a]) if previous_end is None else int(found[a]) - previous_end - 1
        spans.append((offset, b - a))
        previous_end = int(found[b - 1])
    return spans, np.diff(summed, prepend=0).astype(np.int64).tolist()


def percentiles(hist: LatencyHistogram, to_base: float = 1.0) -> dict[float, float]:
    """:data:`QUANTILES` of ``hist`` in the base unit, by the report's rule
    (:meth:`~duplexctl.report.histogram.LatencyHistogram.percentiles`: the upper end of the
    bucket holding rank ``max(1, round(p/100 × n))``), over the bucket arrays at once: a push
    thread holding the GIL for a Python walk over thousands of buckets would delay the
    event loop."""
    _lows, highs, counts = hist.bucket_arrays()
    n = int(counts.sum())
    if n == 0:
        return {}
    cumulative = np.cumsum(counts)
    out = {}
    for q, p in QUANTILES.items():
        rank = max(1, int(p * n / 100.0 + 0.5))
        out[q] = float(highs[int(np.searchsorted(cumulative, rank))]) * to_base
    return out


def summed(hist: LatencyHistogram, to_base: float = 1.0) -> float:
    """The sum of ``hist``'s samples in the base unit (HDR bucket midpoints)."""
    lows, highs, counts = hist.bucket_arrays()
    return float(np.dot((lows + highs) / 2.0, counts)) * to_base if counts.size else 0.0
