"""Lossless, mergeable latency histograms (docs/metrics.md "Statistics").

Why HDR: a load run spread over worker processes and hosts must report one p99 for the whole
run. Percentiles cannot be averaged, and keeping every sample in memory does not scale, so each
worker records into an HDR histogram (3 significant digits) and the parent adds the bucket
counts. Bucket addition is exact: a histogram merged from parts is bucket-for-bucket identical
to one recorded from all the data, so every percentile is too.

Units. Values are recorded as integers of ``1/scale`` of the value unit. For millisecond
figures ``scale = 1000``: integer microseconds, so sub-millisecond values keep precision, and
the trackable range 1 .. 3.6e9 units is 1 µs .. 1 hour. Ratios such as ``rtf`` use
``scale = 1_000_000`` (micro-units, range up to 3600×) so that a ratio of 0.0123 still keeps
three significant digits. Values beyond the range saturate at the top (1 hour for ms); the
reported ``max`` then shows the saturation instead of the run crashing mid-way.

Signed values. ``ttfa_ms`` is negative when the model spoke before the user finished. HDR only
counts non-negative integers, so a second histogram counts the *magnitudes* of negative values.
Percentiles walk the negative buckets from the largest magnitude down, then the non-negative
buckets up, i.e. one ordered distribution over both. A value rounding to 0 µs is counted as
non-negative.

Reported values follow HDR's conventions, mirrored for negatives: a percentile is the upper
end (in value order) of the bucket holding the target rank, ``min`` the lower end of the lowest
bucket, ``max`` the upper end of the highest, ``mean`` uses each bucket's midpoint. All of them
are within 0.1 % of the exact sample statistics, and all derive from the bucket counts alone,
which is what makes them identical after a merge or an encode/decode round trip.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import numpy as np
from hdrh.histogram import HdrHistogram

SIGNIFICANT_DIGITS = 3
LOWEST_TRACKABLE = 1
HIGHEST_TRACKABLE = 3_600_000_000  # 1 hour in µs (scale 1000)

MS_SCALE = 1000
RATIO_SCALE = 1_000_000

#: The percentiles ``to_dict`` reports.
SUMMARY_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)

#: Below this many samples a p99 is one of the top couple of samples, not a tail estimate.
P99_MIN_N = 100

#: Metrics recorded at ``RATIO_SCALE``; everything else at ``MS_SCALE`` (three decimals).
RATIO_METRICS: frozenset[str] = frozenset({"rtf", "rtf_omni", "audio_throughput", "session_rtf"})

#: Separates the non-negative blob from the negative-magnitude blob in ``encode()``. Not in
#: the base64 alphabet, so it cannot occur inside a blob.
_NEG_SEPARATOR = "|"


def scale_for(metric: str) -> int:
    """The recording scale of a metric name: micro-units for ratios, µs for the rest."""
    return RATIO_SCALE if metric in RATIO_METRICS else MS_SCALE


def _new_hdr() -> HdrHistogram:
    return HdrHistogram(LOWEST_TRACKABLE, HIGHEST_TRACKABLE, SIGNIFICANT_DIGITS)


#: Read-only: does the bucket arithmetic (value → counts index → bucket bounds) for all.
_LAYOUT = _new_hdr()


_SUB_MASK: Final = _LAYOUT.sub_bucket_mask
_UNIT_MAG: Final = _LAYOUT.unit_magnitude
_HALF_MAG: Final = _LAYOUT.sub_bucket_half_count_magnitude
_HALF: Final = _LAYOUT.sub_bucket_half_count
#: how many HDR counts indices the layout has (every index is below it)
COUNTS_LEN: Final = int(_LAYOUT.counts_len)


def counts_indices(units: np.ndarray) -> np.ndarray:
    """``_LAYOUT.get_counts_array_index`` of every value of a non-negative int64 array
    (at most HIGHEST_TRACKABLE), vectorised: hdrh's arithmetic with the bit length taken
    from ``frexp`` (exact: the values are far below 2**53)."""
    bits = np.frexp((units | _SUB_MASK).astype(np.float64))[1].astype(np.int64)
    bucket = bits - _UNIT_MAG - (_HALF_MAG + 1)
    sub = units >> (bucket + _UNIT_MAG)
    return ((bucket + 1) << _HALF_MAG) + sub - _HALF


def counts_index(units: int) -> int:
    """``_LAYOUT.get_counts_array_index(units)`` for one non-negative int (at most
    HIGHEST_TRACKABLE): the same arithmetic as :func:`counts_indices` with ``int.bit_length``,
    one call instead of hdrh's four Python ones (recorded per turn figure and per sample)."""
    bucket = (units | _SUB_MASK).bit_length() - _UNIT_MAG - (_HALF_MAG + 1)
    return ((bucket + 1) << _HALF_MAG) + (units >> (bucket + _UNIT_MAG)) - _HALF


@functools.lru_cache(maxsize=32_768)
def _bounds(index: int) -> tuple[int, int]:
    """(lowest, highest) equivalent value of an HDR counts index."""
    low = _LAYOUT.get_value_from_index(index)
    return low, _LAYOUT.get_highest_equivalent_value(low)


def bounds_of(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_bounds` of every HDR counts index of an int array (lowest and highest
    equivalent value), vectorised with hdrh's arithmetic: what a remote-write push
    (:mod:`duplexctl.export.native`) turns a histogram's buckets into, without a Python call
    per bucket."""
    idx = np.asarray(indices, dtype=np.int64)
    bucket = (idx >> _HALF_MAG) - 1
    sub = (idx & (_HALF - 1)) + _HALF
    first = bucket < 0
    sub = np.where(first, sub - _HALF, sub)
    bucket = np.where(first, 0, bucket)
    low = sub << (bucket + _UNIT_MAG)
    width = np.where(sub >= _LAYOUT.sub_bucket_count, bucket + 1, bucket)
    return low, low + (np.int64(1) << (_UNIT_MAG + width)) - 1


#: Counts indices fit in 32 bits (the layout has ``_LAYOUT.counts_len`` of them); counts
#: get 64 bits, so no bucket of any run overflows.
_INDEX_DTYPE: Final = np.int32
_COUNT_DTYPE: Final = np.int64


def _frozen(dtype: Any) -> np.ndarray:
    empty = np.zeros(0, dtype=dtype)
    empty.flags.writeable = False
    return empty


_NO_INDICES: Final = _frozen(_INDEX_DTYPE)
_NO_COUNTS: Final = _frozen(_COUNT_DTYPE)

#: Single records wait in a dict (fast to add to) until this many distinct buckets are
#: pending; then, or when the histogram is read or compacted, they join the arrays.
PENDING_MAX: Final = 256


def _summed(indices: np.ndarray, counts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct indices and the sum of the counts of each (exact integer sums);
    ``counts`` None: each index counts once."""
    if indices.size == 0:
        return _NO_INDICES, _NO_COUNTS
    if counts is None:
        found, n = np.unique(indices, return_counts=True)
        return found.astype(_INDEX_DTYPE), n.astype(_COUNT_DTYPE, copy=False)
    order = np.argsort(indices, kind="stable")
    indices, counts = indices[order], counts[order]
    starts = np.flatnonzero(np.r_[True, indices[1:] != indices[:-1]])
    summed = np.add.reduceat(counts, starts)
    return indices[starts].astype(_INDEX_DTYPE), summed.astype(_COUNT_DTYPE, copy=False)


def _joined(
    indices: np.ndarray, counts: np.ndarray, more: np.ndarray, more_counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Two sorted, distinct (indices, counts) pairs added: counts of shared indices summed,
    the others inserted in order (no sort of the whole: a send-lag fold adds a few hundred
    buckets to a slice's thousand or more, every second)."""
    at = np.searchsorted(indices, more)
    shared = at < indices.size
    shared[shared] = indices[at[shared]] == more[shared]
    summed = counts.copy()
    summed[at[shared]] += more_counts[shared]  # distinct indices: distinct positions
    new = ~shared
    if not new.any():
        return indices, summed
    return (
        np.insert(indices, at[new], more[new]),
        np.insert(summed, at[new], more_counts[new]),
    )


class SparseCounts:
    """HDR counts index → count for the non-empty buckets of one sign.

    Why not a plain dict: a load run keeps a histogram per metric per time slice, and a
    slice's send-lag histogram alone has ~1,500 non-empty buckets. As a dict of Python ints
    that is ~110 bytes a bucket (hash slot, key and count objects): the per-slice
    histograms were a load worker's whole memory growth (issue 16, item 5). Here the buckets
    are two sorted numpy arrays, 12 bytes a bucket. Single records (a turn's figures, one
    loop-lag sample) go first into a small dict, cheap to add to, folded into the arrays
    when it holds :data:`PENDING_MAX` buckets, when read, and when the time slicer closes
    the slice (:meth:`compact`).

    The arrays are never written in place (every change builds new ones), so copies share
    them.
    """

    __slots__ = ("_counts", "_indices", "_pending")

    def __init__(self, indices: np.ndarray = _NO_INDICES, counts: np.ndarray = _NO_COUNTS) -> None:
        self._indices = indices
        self._counts = counts
        self._pending: dict[int, int] | None = None

    @classmethod
    def of(cls, indices: np.ndarray, counts: np.ndarray | None = None) -> SparseCounts:
        """Counts of ``indices`` (in any order, repeats allowed; each counted once, or
        ``counts[i]`` times)."""
        indices = np.asarray(indices)
        if counts is not None:
            counts = np.asarray(counts, dtype=_COUNT_DTYPE)
        return cls(*_summed(indices, counts))

    def add(self, index: int, count: int = 1) -> None:
        pending = self._pending
        if pending is None:
            pending = self._pending = {}
        pending[index] = pending.get(index, 0) + count
        if len(pending) > PENDING_MAX:
            self.compact()

    def add_all(self, other: SparseCounts) -> None:
        """Add every count of ``other`` (exact)."""
        indices, counts = other.arrays()
        if indices.size:
            self._join(indices, counts)

    def _join(self, indices: np.ndarray, counts: np.ndarray) -> None:
        if self._indices.size == 0:
            self._indices, self._counts = indices, counts  # already sorted and distinct
            return
        self._indices, self._counts = _joined(self._indices, self._counts, indices, counts)

    def compact(self) -> None:
        """Fold the pending single records into the arrays."""
        pending = self._pending
        if pending is None:
            return
        self._pending = None
        n = len(pending)
        added = SparseCounts.of(
            np.fromiter(pending.keys(), dtype=_INDEX_DTYPE, count=n),
            np.fromiter(pending.values(), dtype=_COUNT_DTYPE, count=n),
        )
        self.add_all(added)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted distinct counts indices, their counts), read-only views."""
        self.compact()
        return self._indices, self._counts

    def total(self) -> int:
        return int(self.arrays()[1].sum())

    def __bool__(self) -> bool:
        return bool(self._pending) or self._indices.size > 0

    def copy(self) -> SparseCounts:
        indices, counts = self.arrays()
        return SparseCounts(indices, counts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SparseCounts):
            return NotImplemented
        a, b = self.arrays(), other.arrays()
        return np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])

    __hash__ = None  # type: ignore[assignment]  # mutable


def _buckets(counts: SparseCounts) -> list[tuple[int, int, int]]:
    """(lowest, highest, count) of every non-empty bucket, ascending (the HDR counts index
    is monotone in the value)."""
    return [(*_bounds(i), c) for i, c in _index_counts(counts)]


def _blob(counts: SparseCounts) -> str:
    """The HDR V2 compressed base64 of ``counts``."""
    hdr = _new_hdr()
    try:
        for index, count in _index_counts(counts):
            hdr.record_value(_bounds(index)[0], count)
        return hdr.encode().decode("ascii")
    finally:
        _release(hdr)


def _release(hdr: HdrHistogram) -> None:
    """Free an hdrh histogram now. It and its encoder refer to each other, so its dense
    counts array (~190 kB) waited for the cyclic garbage collector: encoding a run's
    slices at its end left tens of MB of them behind (issue 16, item 5)."""
    hdr.encoder = None


def _index_counts(counts: SparseCounts) -> Iterator[tuple[int, int]]:
    indices, n = counts.arrays()
    return zip(indices.tolist(), n.tolist(), strict=True)


def _from_blob(blob: str) -> SparseCounts:
    """Counts of an HDR blob in our layout (re-bucketed by value if it used another one)."""
    decoded = HdrHistogram.decode(blob)
    try:
        return _counts_of(decoded)
    finally:
        _release(decoded)


def _counts_of(decoded: HdrHistogram) -> SparseCounts:
    dense = np.ctypeslib.as_array(decoded.counts)
    found = np.flatnonzero(dense)
    same_layout = (
        decoded.lowest_trackable_value == LOWEST_TRACKABLE
        and decoded.highest_trackable_value == HIGHEST_TRACKABLE
        and decoded.significant_figures == SIGNIFICANT_DIGITS
    )
    if same_layout:
        ours = found
    else:
        values = (decoded.get_value_from_index(int(i)) for i in found)
        ours = np.array(
            [_LAYOUT.get_counts_array_index(min(v, HIGHEST_TRACKABLE)) for v in values],
            dtype=np.int64,
        )
    return SparseCounts.of(ours, dense[found])


class LatencyHistogram:
    """A signed HDR histogram of one figure, in the figure's own unit (ms by default).

    ``scale`` is how many recorded integer units make one value unit (1000: µs per ms).
    Two histograms merge only if their scales agree.

    Storage is sparse: HDR's bucket layout and wire encoding (hdrh), but only non-empty
    buckets are kept (:class:`SparseCounts`, 12 bytes a bucket). A dense hdrh histogram over
    1 µs .. 1 h holds 23,552 64-bit counters (~190 kB); a run with per-slice, per-metric
    histograms would need gigabytes, while a latency occupies a few thousand buckets at most.
    """

    __slots__ = ("_neg", "_pos", "scale")

    def __init__(self, scale: int = MS_SCALE) -> None:
        if scale < 1:
            raise ValueError(f"histogram scale must be >= 1, got {scale}")
        self.scale = int(scale)
        self._pos = SparseCounts()
        self._neg = SparseCounts()

    # -- recording -----------------------------------------------------------------------

    def record(self, value: float, count: int = 1) -> None:
        """Record ``value`` (in the value unit, e.g. ms) ``count`` times.

        NaN and infinities are refused: they mean a bug upstream (a missing timestamp), and
        silently bucketing them would corrupt every percentile after it.
        """
        if not math.isfinite(value):
            raise ValueError(f"cannot record a non-finite value: {value!r}")
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        units = round(value * self.scale)
        counts = self._pos if units >= 0 else self._neg
        counts.add(counts_index(min(abs(units), HIGHEST_TRACKABLE)), count)

    def record_many(self, values: Iterable[float]) -> None:
        for value in values:
            self.record(value)

    def record_array(self, values: np.ndarray) -> None:
        """Record every value of a float array: the same buckets as :meth:`record` per value
        (round half to even, clamped, HDR index), in a few numpy passes.

        A load process records thousands of send lags a second; doing it per value in
        Python was a measurable share of its CPU, so they are folded in batches.
        """
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if v.size == 0:
            return
        if not np.isfinite(v).all():
            raise ValueError("cannot record a non-finite value")
        units = np.rint(v * self.scale).astype(np.int64)
        index = counts_indices(np.minimum(np.abs(units), HIGHEST_TRACKABLE))
        negative = units < 0
        for counts, picked in ((self._pos, index[~negative]), (self._neg, index[negative])):
            if picked.size:
                counts.add_all(SparseCounts.of(picked))

    # -- reading -------------------------------------------------------------------------

    @property
    def count(self) -> int:
        return self._pos.total() + self._neg.total()

    @property
    def negative_count(self) -> int:
        """Samples below zero (for ``ttfa_ms``: early starts, docs/metrics.md)."""
        return self._neg.total()

    def __len__(self) -> int:
        return self.count

    def _ordered(self) -> Iterator[tuple[int, int, int]]:
        """(lowest, highest, count) in value units ×scale, over both signs, ascending."""
        for low, high, count in reversed(_buckets(self._neg)):
            yield -high, -low, count
        yield from _buckets(self._pos)

    def percentiles(self, ps: Iterable[float]) -> dict[float, float | None]:
        """Several percentiles in one pass; ``None`` for each when the histogram is empty.

        Rank rule as HDR's: the value at percentile p is the bucket holding the sample of rank
        ``max(1, round(p/100 × n))``; p = 0 gives the minimum.
        """
        wanted = sorted(set(float(p) for p in ps))
        for p in wanted:
            if not 0.0 <= p <= 100.0:
                raise ValueError(f"percentile must be within 0..100, got {p}")
        n = self.count
        if n == 0:
            return dict.fromkeys(wanted)
        out: dict[float, float | None] = {}
        targets = [(p, max(1, int(p * n / 100.0 + 0.5))) for p in wanted]
        seen = 0
        i = 0
        for low, high, count in self._ordered():
            seen += count
            while i < len(targets) and targets[i][1] <= seen:
                p = targets[i][0]
                out[p] = (low if p == 0.0 else high) / self.scale
                i += 1
            if i == len(targets):
                break
        return out

    def percentile(self, p: float) -> float | None:
        return self.percentiles([p])[float(p)]

    @property
    def min(self) -> float | None:
        for low, _high, _count in self._ordered():
            return low / self.scale
        return None

    @property
    def max(self) -> float | None:
        pos, neg = self._pos.arrays()[0], self._neg.arrays()[0]
        if pos.size:
            return _bounds(int(pos[-1]))[1] / self.scale
        if neg.size:
            return -_bounds(int(neg[0]))[0] / self.scale
        return None

    @property
    def mean(self) -> float | None:
        n = self.count
        if n == 0:
            return None
        total = sum((low + high) / 2 * count for low, high, count in self._ordered())
        return total / n / self.scale

    def bucket_counts(self) -> list[tuple[float, float, int]]:
        """(lowest, highest, count) of each non-empty bucket in value units, ascending.

        The complete content of the histogram: two histograms with equal bucket counts give
        equal answers to every question. Used by tests and plots.
        """
        return [(lo / self.scale, hi / self.scale, c) for lo, hi, c in self._ordered()]

    def sparse(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The non-empty buckets as HDR counts indices and counts: (non-negative indices,
        their counts, negative magnitudes' indices, their counts), each ascending."""
        pos_i, pos_n = self._pos.arrays()
        neg_i, neg_n = self._neg.arrays()
        return pos_i, pos_n, neg_i, neg_n

    def bucket_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`bucket_counts` as three arrays (lowest, highest, count), ascending."""
        neg_i, neg_n = self._neg.arrays()
        pos_i, pos_n = self._pos.arrays()
        neg_lo, neg_hi = bounds_of(neg_i[::-1])
        pos_lo, pos_hi = bounds_of(pos_i)
        lows = np.concatenate([-neg_hi, pos_lo]) / self.scale
        highs = np.concatenate([-neg_lo, pos_hi]) / self.scale
        return lows, highs, np.concatenate([neg_n[::-1], pos_n])

    def to_dict(self) -> dict[str, Any]:
        """The summary written to report.json and printed: every figure with its ``n``."""
        n = self.count
        ps = self.percentiles(SUMMARY_PERCENTILES)
        return {
            "n": n,
            "p50": ps[50.0],
            "p90": ps[90.0],
            "p95": ps[95.0],
            "p99": ps[99.0],
            "max": self.max,
            "mean": self.mean,
            "min": self.min,
            "p99_low_n": n < P99_MIN_N,
        }

    # -- merging and encoding ------------------------------------------------------------

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        """Add ``other``'s counts into this histogram (exact); returns ``self``."""
        if other.scale != self.scale:
            raise ValueError(f"cannot merge histograms of scale {self.scale} and {other.scale}")
        self._pos.add_all(other._pos)
        self._neg.add_all(other._neg)
        return self

    def compact(self) -> None:
        """Fold pending single records into the compact arrays (see :class:`SparseCounts`):
        the time slicer does this when a slice is closed."""
        self._pos.compact()
        self._neg.compact()

    def __iadd__(self, other: LatencyHistogram) -> LatencyHistogram:
        return self.merge(other)

    def copy(self) -> LatencyHistogram:
        twin = LatencyHistogram(self.scale)
        twin._pos, twin._neg = self._pos.copy(), self._neg.copy()
        return twin

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LatencyHistogram):
            return NotImplemented
        return self.scale == other.scale and (self._pos, self._neg) == (other._pos, other._neg)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def encode(self) -> str:
        """HDR V2 compressed base64 of the non-negative counts, then ``|`` and the negative
        magnitudes' blob if there are any.

        Without negatives the string is a plain HDR histoblob that any HDR tool can read
        (in units of ``1/scale``). The scale is not inside the blob; ``HistogramSet.encode``
        stores it beside each one.
        """
        pos = _blob(self._pos)
        if not self._neg:
            return pos
        return pos + _NEG_SEPARATOR + _blob(self._neg)

    @classmethod
    def decode(cls, text: str, scale: int = MS_SCALE) -> LatencyHistogram:
        """Inverse of :meth:`encode`; ``ValueError`` naming the problem for a corrupt string."""
        hist = cls(scale)
        parts = text.strip().split(_NEG_SEPARATOR)
        if len(parts) > 2 or not parts[0]:
            raise ValueError("not an encoded histogram (expected HDR base64[|HDR base64])")
        try:
            hist._pos = _from_blob(parts[0])
            if len(parts) == 2:
                hist._neg = _from_blob(parts[1])
        except Exception as exc:  # hdrh raises TypeError, zlib.error, its own cookie errors
            raise ValueError(f"not an encoded histogram: {exc}") from exc
        return hist

    def __repr__(self) -> str:
        return f"LatencyHistogram(n={self.count}, scale={self.scale})"


class HistogramSet:
    """Histograms keyed by metric name (``ttfa_ms``, ``rtf``, ``send_lag_ms`` …).

    A histogram is created on first record, at ``scale_for(name)`` unless ``scales``
    overrides it; the scale travels with the encoding, so decoding never depends on the
    registry of the version that wrote it.
    """

    __slots__ = ("_hists", "_scales")

    def __init__(self, scales: Mapping[str, int] | None = None) -> None:
        self._hists: dict[str, LatencyHistogram] = {}
        self._scales: dict[str, int] = dict(scales or {})

    def histogram(self, name: str) -> LatencyHistogram:
        """The histogram for ``name``, created empty if absent."""
        hist = self._hists.get(name)
        if hist is None:
            hist = self._hists[name] = LatencyHistogram(self._scales.get(name, scale_for(name)))
        return hist

    def record(self, name: str, value: float | None) -> None:
        """Record one value; ``None`` (figure not applicable to this turn) is skipped."""
        if value is not None:
            self.histogram(name).record(value)

    def record_figures(self, figures: Mapping[str, float | None]) -> None:
        for name, value in figures.items():
            self.record(name, value)

    def get(self, name: str) -> LatencyHistogram | None:
        return self._hists.get(name)

    def __getitem__(self, name: str) -> LatencyHistogram:
        return self._hists[name]

    def __contains__(self, name: object) -> bool:
        return name in self._hists

    def __iter__(self) -> Iterator[str]:
        return iter(self._hists)

    def __len__(self) -> int:
        return len(self._hists)

    def names(self) -> list[str]:
        return list(self._hists)

    def items(self) -> Iterator[tuple[str, LatencyHistogram]]:
        return iter(self._hists.items())

    def merge(self, other: HistogramSet) -> HistogramSet:
        """Add every histogram of ``other`` into this set (exact); returns ``self``."""
        for name, hist in other.items():
            mine = self._hists.get(name)
            if mine is None:
                self._hists[name] = hist.copy()
            else:
                mine.merge(hist)
        return self

    def copy(self) -> HistogramSet:
        return HistogramSet(self._scales).merge(self)

    def compact(self) -> None:
        """Every histogram's pending single records folded into its compact arrays."""
        for hist in self._hists.values():
            hist.compact()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HistogramSet):
            return NotImplemented
        return self._hists == other._hists

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """``{metric: summary}`` (see :meth:`LatencyHistogram.to_dict`)."""
        return {name: hist.to_dict() for name, hist in self._hists.items()}

    def encode(self) -> dict[str, dict[str, Any]]:
        """``{metric: {"scale": int, "hdr": str}}`` for report.json."""
        return {
            name: {"scale": hist.scale, "hdr": hist.encode()} for name, hist in self._hists.items()
        }

    @classmethod
    def decode(cls, data: Mapping[str, Any]) -> HistogramSet:
        """Inverse of :meth:`encode`; ``ValueError`` naming the metric for a bad entry."""
        out = cls()
        for name, entry in data.items():
            try:
                scale = int(entry["scale"])
                hist = LatencyHistogram.decode(entry["hdr"], scale)
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"histogram {name!r}: {exc}") from exc
            out._scales[name] = scale
            out._hists[name] = hist
        return out

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}: n={v.count}" for k, v in self._hists.items())
        return f"HistogramSet({inner})"
