"""The summaries of scraped samples (pure): counter deltas across a restart, Prometheus'
histogram_quantile, gauges per window, the knee in server terms."""

from __future__ import annotations

import math

import pytest

from duplexctl.prometheus.exposition import Family, Sample
from duplexctl.prometheus.store import Store
from duplexctl.prometheus.summary import (
    Summariser,
    counter_delta,
    explain_knee,
    quantile,
    summarise,
)

E = "http://s/metrics"


def _scrape(
    store: Store, t: float, waiting: float, requests: float, buckets: dict[str, float]
) -> None:
    bucket_samples = [
        Sample("vllm:time_to_first_token_seconds_bucket", {"le": le}, v)
        for le, v in buckets.items()
    ]
    count = Sample("vllm:time_to_first_token_seconds_count", {}, buckets["+Inf"])
    families = [
        Family("vllm:num_requests_waiting", "gauge", "w", (Sample("vllm:num_requests_waiting", {}, waiting),)),
        Family("vllm:request_success", "counter", "s", (Sample("vllm:request_success_total", {}, requests),)),
        Family("vllm:time_to_first_token_seconds", "histogram", "h", (*bucket_samples, count)),
    ]  # fmt: skip
    store.add_scrape(t, E, families)


def test_a_counter_counts_its_increase_and_survives_a_restart() -> None:
    assert counter_delta([0, 1, 2, 3], [10, 12, 15, 15], 0, 3) == 5
    assert counter_delta([0, 1, 2, 3], [10, 12, 3, 5], 0, 3) == 2 + 3 + 2  # restart at t=2
    assert counter_delta([0, 1, 2, 3], [10, 12, 15, 20], 1, 2) == 3  # from the value at t0


def test_quantile_interpolates_inside_the_bucket_like_prometheus() -> None:
    buckets = [(0.1, 0.0), (0.5, 10.0), (1.0, 20.0), (math.inf, 20.0)]
    assert quantile(0.5, buckets) == pytest.approx(0.5)
    assert quantile(0.25, buckets) == pytest.approx(0.1 + 0.4 * 0.5)
    assert quantile(0.99, buckets) == pytest.approx(0.5 + 0.5 * 9.8 / 10)
    assert quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]) is None
    assert quantile(0.99, [(1.0, 1.0), (math.inf, 10.0)]) == 1.0  # in +Inf: its lower bound


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
    assert ttft["p50"] == pytest.approx(0.5 + 0.5 * (5 - 2) / 8)
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
