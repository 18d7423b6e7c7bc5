"""What one ``--prometheus-rw`` push costs to build, and what OpenTelemetry's exporter would cost.

The choice the issue asked to measure (duplexctl/export/remote_write.py says it): protobuf +
cramjam with our own message declaration, or OpenTelemetry's Prometheus remote-write exporter.
Both build one push of the same figures — a 300-session load after a minute: every append's
send lag (300 × 10 a second × 60 s = 180,000 samples), and 2,700 turns with ten latency
figures each — and are timed building it (no network):

* **ours**: the worker's side (``Recorder.export_state``: what the event loop pays) and the
  push thread's (native histograms, and the percentiles fallback: protobuf, then snappy);
* **OpenTelemetry** (``--otel``, in a virtualenv with
  ``opentelemetry-exporter-prometheus-remote-write``; it needs nothing of duplexctl): the SDK's
  histograms (explicit buckets: the exporter writes no native histograms), collected, then the
  exporter's own translation and ``WriteRequest`` + snappy.

    .venv/bin/python bench/remote_write_wire.py
    OTEL_VENV/bin/python bench/remote_write_wire.py --otel
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SESSIONS = 300
SECONDS = 60
TURNS = 2700
FIGURES = (
    "ttfa_ms", "ttft_ms", "first_audible_ms", "turn_ms", "ttfa_commit_ms", "ttfa_created_ms",
    "chunk_gap_ms", "stall_ms", "response_gap_ms", "connect_ms",
)  # fmt: skip


def samples() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(36)
    out = {"send_lag_ms": rng.lognormal(0.0, 0.8, SESSIONS * 10 * SECONDS)}
    for i, name in enumerate(FIGURES):
        out[name] = rng.lognormal(5.5 + 0.1 * i, 0.4, TURNS)
    return out


def timed(fn: Callable[[], Any], repeat: int = 20) -> tuple[float, Any]:
    """Median ms of ``repeat`` calls, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), result


def ours() -> None:
    from duplexctl.export.remote_write import Batch, encode
    from duplexctl.load.recorder import Recorder

    rec = Recorder(origin=0.0, slice_s=10.0)
    data = samples()
    t = np.linspace(0.0, SECONDS - 1e-3, data["send_lag_ms"].size)
    rec._slicer.add_figures(t, "send_lag_ms", data["send_lag_ms"])
    for k in range(TURNS):
        rec._slicer.add_turn(k * SECONDS / TURNS, {n: float(data[n][k]) for n in FIGURES}, "spoke")
        rec.outcomes["spoke"] += 1
    rec.admissions["admitted"] = 900
    state_ms, state = timed(rec.export_state)
    labels = (("command", "load"), ("job", "duplexctl"), ("run_id", "bench"), ("target", "ws://x"))
    batch = Batch({0: (None, state)})
    native_ms, (body, series) = timed(lambda: encode(batch, labels, "native", 1))
    pct_ms, (pct_body, pct_series) = timed(lambda: encode(batch, labels, "percentiles", 1))
    print("ours (protobuf upb + cramjam), one push of a 300-session minute:")
    print(f"  worker's side, Recorder.export_state (the event loop): {state_ms:.2f} ms")
    print(
        f"  push thread, native histograms:  {native_ms:.2f} ms, {series} series, {len(body)} bytes"
    )
    print(
        f"  push thread, percentiles:        {pct_ms:.2f} ms, {pct_series} series, {len(pct_body)} bytes"
    )


def otel() -> None:
    from opentelemetry.exporter.prometheus_remote_write import (
        PrometheusRemoteWriteMetricsExporter as Exporter,
    )
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("duplexctl")
    data = samples()
    t0 = time.perf_counter()
    for name, values in data.items():
        hist = meter.create_histogram(name.removesuffix("_ms") + "_seconds", unit="s")
        for v in values:
            hist.record(float(v) / 1000, {"phase": "steady"})
    record_s = time.perf_counter() - t0
    exporter = Exporter(endpoint="http://127.0.0.1:9/api/v1/write")
    collect_ms, metrics = timed(reader.get_metrics_data)

    def build() -> tuple[bytes, int]:
        series = exporter._translate_data(metrics)
        return exporter._build_message(series), len(series)

    build_ms, (body, series) = timed(build)
    n = sum(v.size for v in data.values())
    print("OpenTelemetry SDK + opentelemetry-exporter-prometheus-remote-write, the same push:")
    print(
        f"  recording the {n} samples: {record_s * 1e6 / n:.2f} us a sample (ours: HDR, already recorded)"
    )
    print(f"  collect (the SDK's reader): {collect_ms:.2f} ms")
    print(
        f"  translate + WriteRequest + snappy: {build_ms:.2f} ms, {series} series (classic _bucket), {len(body)} bytes"
    )
    print("  native histograms: none (the exporter writes explicit-bucket series only)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--otel", action="store_true", help="time OpenTelemetry's exporter")
    args = parser.parse_args()
    otel() if args.otel else ours()


if __name__ == "__main__":
    main()
