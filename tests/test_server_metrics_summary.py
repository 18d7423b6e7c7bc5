"""The summaries of scraped samples (pure): counter deltas across a restart, a histogram as
its count, mean and the bucket each percentile falls in (never an interpolated point; none
above 0 where the sum is 0; none from fewer than 5 observations), gauges per window, the
knee in server terms."""

from __future__ import annotations

import math

import pytest

from duplexctl.prometheus.exposition import Family, Sample
from duplexctl.prometheus.store import Store
from duplexctl.prometheus.summary import (
    Summariser,
    bucket_of,
    counter_delta,
    explain_knee,
    histogram_text,
    render_lines,
    summarise,
)

E = "http://s/metrics"


def _scrape(
    store: Store,
    t: float,
    waiting: float,
    requests: float,
    buckets: dict[str, float],
    total: float | None = None,
    name: str = "vllm:time_to_first_token_seconds",
) -> None:
    bucket_samples = [Sample(f"{name}_bucket", {"le": le}, v) for le, v in buckets.items()]
    count = Sample(f"{name}_count", {}, buckets["+Inf"])
    sums = [] if total is None else [Sample(f"{name}_sum", {}, total)]
    families = [
        Family("vllm:num_requests_waiting", "gauge", "w", (Sample("vllm:num_requests_waiting", {}, waiting),)),
        Family("vllm:request_success", "counter", "s", (Sample("vllm:request_success_total", {}, requests),)),
        Family(name, "histogram", "h", (*bucket_samples, count, *sums)),
    ]  # fmt: skip
    store.add_scrape(t, E, families)


def test_a_counter_counts_its_increase_and_survives_a_restart() -> None:
    assert counter_delta([0, 1, 2, 3], [10, 12, 15, 15], 0, 3) == 5
    assert counter_delta([0, 1, 2, 3], [10, 12, 3, 5], 0, 3) == 2 + 3 + 2  # restart at t=2
    assert counter_delta([0, 1, 2, 3], [10, 12, 15, 20], 1, 2) == 3  # from the value at t0


def test_a_percentile_is_the_bucket_it_falls_in() -> None:
    buckets = [(0.1, 0.0), (0.5, 10.0), (1.0, 20.0), (math.inf, 20.0)]
    assert bucket_of(0.5, buckets) == (0.1, 0.5)
    assert bucket_of(0.51, buckets) == (0.5, 1.0)
    assert bucket_of(0.99, buckets) == (0.5, 1.0)
    assert bucket_of(0.01, [(0.3, 5.0), (math.inf, 5.0)]) == (0.0, 0.3)  # the first: from 0
    assert bucket_of(0.5, [(1.0, 0.0), (math.inf, 0.0)]) is None
    assert bucket_of(0.99, [(1.0, 1.0), (math.inf, 10.0)]) == (1.0, math.inf)


def test_every_value_0_300_s_is_a_bucket_and_an_exact_mean_not_0_375() -> None:
    """The issue's TTFT: 8 replies of exactly 0.300 s. Interpolation said p50 0.375 s."""
    store = Store()
    _scrape(store, 0.0, 0, 0, {"0.25": 0, "0.5": 0, "+Inf": 0}, total=0.0)
    _scrape(store, 9.0, 0, 0, {"0.25": 0, "0.5": 8, "+Inf": 8}, total=2.4)
    (ttft,) = Summariser(store).histograms(0, 9)
    assert ttft["mean"] == pytest.approx(0.3)
    assert ttft["p50"] == ttft["p99"] == {"low": 0.25, "high": 0.5}
    assert histogram_text(ttft) == "8 observations, mean 0.3 s, p50–p99 in (0.25, 0.5] s"


def test_a_sum_of_0_has_no_positive_percentile() -> None:
    """The issue's queue time: every reply waited 0 s; interpolation said p50 150 ms."""
    store = Store()
    name = "vllm:request_queue_time_seconds"
    _scrape(store, 0.0, 0, 0, {"0.3": 0, "0.5": 0, "+Inf": 0}, total=0.0, name=name)
    _scrape(store, 9.0, 0, 0, {"0.3": 8, "0.5": 8, "+Inf": 8}, total=0.0, name=name)
    section = summarise(store, endpoints=[{"url": E, "origin": "default"}], interval_s=1.0)
    (queue,) = section["histograms"]
    assert queue["mean"] == 0.0 and queue["note"] == "sum 0: every observation was 0"
    for p in ("p50", "p90", "p99"):
        assert queue[p] == {"low": 0.0, "high": 0.0}
    (line,) = [x for x in render_lines(section) if name in x]
    assert line.endswith("8 observations, mean 0 s, p50–p99 0 s (sum 0: every observation was 0)")
    assert "0.15" not in line and "150" not in line


def test_fewer_than_five_observations_have_no_spread() -> None:
    store = Store()
    _scrape(store, 0.0, 0, 0, {"0.5": 0, "1.0": 0, "+Inf": 0}, total=0.0)
    _scrape(store, 9.0, 0, 0, {"0.5": 1, "1.0": 1, "+Inf": 1}, total=0.42)
    (one,) = Summariser(store).histograms(0, 9)
    assert one["count"] == 1 and one["mean"] == pytest.approx(0.42)
    assert one["p50"] is None and one["p90"] is None and one["p99"] is None
    assert histogram_text(one) == (
        "1 observation, mean 0.42 s (count and mean only: a spread needs 5 observations)"
    )


def test_windows_summarise_gauges_counters_and_histogram_deltas() -> None:
    store = Store()
    _scrape(store, 0.0, 0, 100, {"0.5": 40, "1.0": 50, "+Inf": 50})  # counted before the run
    _scrape(store, 5.0, 2, 104, {"0.5": 42, "1.0": 54, "+Inf": 54})
    _scrape(store, 10.0, 9, 110, {"0.5": 42, "1.0": 60, "+Inf": 60})
    s = Summariser(store)
    (waiting,) = s.gauges(0, 10)
    assert (waiting["min"], waiting["max"], waiting["mean"]) == (0, 9, pytest.approx(11 / 3))
    (requests,) = s.counters(0, 10)
    assert requests["delta"] == 10
    (ttft,) = s.histograms(0, 10)
    assert ttft["count"] == 10  # 50 → 60: only what happened in the run
    assert ttft["p50"] == {"low": 0.5, "high": 1.0}  # ranks 3-10 of the run's 10: (0.5, 1]
    assert s.histograms(5, 10)[0]["count"] == 6
    assert s.key(5, 10)["waiting"]["max"] == 9


def test_the_knee_compares_the_last_pass_with_the_first_failure() -> None:
    store = Store()
    for t, w in ((1.0, 0), (2.0, 0), (11.0, 4), (12.0, 9)):
        _scrape(store, t, w, 0, {"+Inf": 0})
    store.windows += [("8", 0.0, 10.0), ("12", 10.0, 20.0)]
    section = summarise(store, endpoints=[{"url": E, "origin": "default"}], interval_s=1.0)
    knee = explain_knee(section, 8, 12, "sessions")
    assert knee is not None
    assert knee["text"] == "at 12 sessions: waiting requests 0 → 9 (from 8 sessions)"
    assert explain_knee(section, 8, None, "sessions") is None  # nothing failed: no knee
