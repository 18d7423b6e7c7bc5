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

from dataclasses import dataclass
from typing import Final

import numpy as np

from duplexctl.report.histogram import LatencyHistogram

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
    """``hist`` (values × ``to_base`` = the base unit) as a native histogram."""
    lows, highs, counts = hist.bucket_arrays()
    mids = (lows + highs) / 2.0 * to_base
    total = float(np.dot(mids, counts)) if counts.size else 0.0
    zero = mids == 0.0
    pos, neg = mids > 0.0, mids < 0.0
    pos_spans, pos_deltas = _buckets(mids[pos], counts[pos])
    neg_spans, neg_deltas = _buckets(-mids[neg], counts[neg])
    return NativeHistogram(
        count=int(counts.sum()),
        sum=total,
        zero_count=int(counts[zero].sum()),
        positive_spans=pos_spans,
        positive_deltas=pos_deltas,
        negative_spans=neg_spans,
        negative_deltas=neg_deltas,
    )


def bucket_index(values: np.ndarray) -> np.ndarray:
    """The native bucket index of each positive value: ``ceil(log2(v) * 2^schema)``."""
    return np.ceil(np.log2(values) * (1 << SCHEMA)).astype(np.int64)


def _buckets(magnitudes: np.ndarray, counts: np.ndarray) -> tuple[list[tuple[int, int]], list[int]]:
    """Spans ``(offset, length)`` and delta-encoded counts of positive magnitudes."""
    if magnitudes.size == 0:
        return [], []
    index = bucket_index(magnitudes)
    order = np.argsort(index, kind="stable")
    index, counts = index[order], counts[order]
    starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
    found = index[starts]
    summed = np.add.reduceat(counts, starts)
    breaks = np.flatnonzero(np.diff(found) != 1) + 1
    first = np.r_[0, breaks]
    last = np.r_[breaks, found.size]
    spans = []
    previous_end = None
    for a, b in zip(first.tolist(), last.tolist(), strict=True):
        offset = int(found[a]) if previous_end is None else int(found[a]) - previous_end - 1
        spans.append((offset, b - a))
        previous_end = int(found[b - 1])
    deltas = np.diff(summed, prepend=0)
    return spans, deltas.astype(np.int64).tolist()


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
