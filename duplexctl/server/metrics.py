"""``GET /metrics``: the reference server's state under the names a vLLM / vLLM-Omni 0.30
deployment publishes (docs/metrics.md "Server metrics"): vLLM's families as vLLM-Omni's stat
logger relabels them (``stage`` and ``replica`` instead of ``engine``).

Why these names: a user points duplexctl's scraper (and their dashboards) at a real server
and at ``duplexctl serve`` alike, so every family whose meaning the simulation has keeps
vLLM's (``vllm/v1/metrics/loggers.py``) or vLLM-Omni's (``vllm_omni/metrics/``) exact name,
type, label names and help text (``tests/test_server_metrics_serve.py`` compares them with an
exposition produced by those classes). What vLLM-Omni has no name for (the duplex session
state) is prefixed ``duplexctl:``.

What they mean on the simulated GPU (``server/model.py``): a *request* is one reply, from
its submission (the time to first audio is its prefill) to its last output unit or its cut:
``num_requests_running`` = replies in progress not waiting for a batch slot (at least the
slots computing), ``num_requests_waiting`` = units queued for a slot, ``kv_cache_usage_perc``
= running requests over the cache's room (``gpu_slots``, or with unlimited slots the
admission limit ``max_sessions``), at most 1. So a default server (unlimited slots) shows
its replies in progress too, and its server row and charts are not flat zero while it
speaks. On the frame-locked profile a session's open stream is its running request, from
its first packet to its ``response.done`` (the lane streams every frame, silence too). The
histograms are per reply: time to first token and first audio (submission → first unit
computed, the same instant here: the model has no text stage),
queue time (the time its units waited for slots), end-to-end latency (submission → last
unit). Gauges are read at scrape time, so they are exact at that instant.

The audio continuity families are vLLM-Omni's (``vllm_omni/metrics/modality.py``), with its
arithmetic (:class:`~duplexctl.audio.playback.WorstDeficit`) on the instants the server
releases a reply's units, relative to the reply's submission: ``audio_underrun_s`` (the
worst deficit of a player starting at the first unit), ``audio_continuity_ok_total
{threshold_ms="100"}`` (vLLM-Omni's one default threshold) and ``audio_rtf`` (submission →
last unit over the audio released). So ``serve --realtime-factor 1.5`` shows the underrun the
client measures, less the network. ``duplexctl:build_info`` names the version serving.

Each server has its own ``CollectorRegistry`` (not prometheus_client's process-wide one), so
two servers in one process (tests, the embedded server) never share a series.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from duplexctl import __version__
from duplexctl.audio.playback import WorstDeficit
from duplexctl.server.config import ServerConfig
from duplexctl.server.registry import Registry

#: vLLM 0.30 ``vllm/v1/metrics/buckets.py`` (``time_to_first_token``, ``request_latency``)
TTFT_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS: Final = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
#: vLLM-Omni 0.30 ``vllm_omni/metrics/definitions.py`` ``SECONDS_BUCKETS``
OMNI_SECONDS_BUCKETS: Final = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip

#: vLLM-Omni 0.30 ``SECONDS_FAST_BUCKETS`` (audio underrun) and ``RTF_BUCKETS``
OMNI_FAST_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
)  # fmt: skip
OMNI_RTF_BUCKETS: Final = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0, 5.0, 10.0)
#: vLLM-Omni's ``AUDIO_CONTINUITY_DEFAULT_THRESHOLD_S``, as its counter's label
CONTINUITY_THRESHOLD_MS: Final = 100

#: vLLM-Omni's stat logger replaces vLLM's ``engine`` label with ``stage`` + ``replica``
#: (vllm_omni/metrics/stat_logger.py); the simulated model is one stage, one replica.
VLLM_LABELS: Final = ("model_name", "stage", "replica")
STAGE: Final = "0"
REPLICA: Final = "0"


class ServerMetrics:
    """One server's metric families; the GPU reports replies to it (``RequestObserver``)."""

    def __init__(self, config: ServerConfig, registry: Registry, gpu: Any) -> None:
        self.config = config
        self.registry = registry
        self.gpu = gpu
        self.prom = CollectorRegistry()
        model = config.served_model
        vllm = (model, STAGE, REPLICA)
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            VLLM_LABELS,
            buckets=TTFT_BUCKETS,
            registry=self.prom,
        ).labels(*vllm)
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            VLLM_LABELS,
            buckets=REQUEST_LATENCY_BUCKETS,
            registry=self.prom,
        ).labels(*vllm)
        self._queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            VLLM_LABELS,
            buckets=REQUEST_LATENCY_BUCKETS,
            registry=self.prom,
        ).labels(*vllm)
        self._ttfp = Histogram(
            "vllm_omni:audio_ttfp_s",
            "Time from request arrival to first audio packet/frame, in seconds.",
            ("model_name", "stage", "replica"),
            buckets=OMNI_SECONDS_BUCKETS,
            registry=self.prom,
        ).labels(model, STAGE, REPLICA)
        self._rtf = Histogram(
            "vllm_omni:audio_rtf",
            "Audio real-time factor (stage_gen_time_s / audio_duration_s); streaming TTS "
            "requires < 1.",
            ("model_name", "stage", "replica"),
            buckets=OMNI_RTF_BUCKETS,
            registry=self.prom,
        ).labels(model, STAGE, REPLICA)
        self._underrun = Histogram(
            "vllm_omni:audio_underrun_s",
            "Per-request worst-case player-deficit in seconds (max time the player ran out of "
            "buffered audio). > 0 indicates listener experienced silent gaps.",
            ("model_name", "stage", "replica"),
            buckets=OMNI_FAST_BUCKETS,
            registry=self.prom,
        ).labels(model, STAGE, REPLICA)
        self._continuity_ok = Counter(
            "vllm_omni:audio_continuity_ok",
            "Incremented when the request's worst underrun stayed below threshold_ms. Pair "
            "with requests_success_total to compute streaming-continuity health rate.",
            ("model_name", "stage", "replica", "threshold_ms"),
            registry=self.prom,
        ).labels(model, STAGE, REPLICA, str(CONTINUITY_THRESHOLD_MS))
        Gauge(
            "duplexctl:build_info",
            "The duplexctl version serving (value 1).",
            ("version",),
            registry=self.prom,
        ).labels(__version__).set(1)
        self._finished: dict[str, int] = {}
        self.prom.register(_StateCollector(self))
        if gpu is not None:
            gpu.observer = self

    # -- RequestObserver (server/model.py) --------------------------------------------------

    def first_output(self, seconds: float) -> None:
        self._ttft.observe(seconds)
        self._ttfp.observe(seconds)

    def finished(self, queue_s: float, e2e_s: float, reason: str) -> None:
        self._queue.observe(queue_s)
        if reason == "stop":
            self._e2e.observe(e2e_s)
        self._finished[reason] = self._finished.get(reason, 0) + 1

    def audio_finished(self, submitted_at: float, sent: list[tuple[float, float]]) -> None:
        """A reply's units as released: vLLM-Omni's continuity and RTF (module docstring)."""
        deficit = WorstDeficit()
        for at, ms in sent:
            deficit.add(at, ms)
        self._underrun.observe(deficit.worst_ms / 1000.0)
        if deficit.worst_ms <= CONTINUITY_THRESHOLD_MS:
            self._continuity_ok.inc()
        if deficit.received_ms > 0:
            self._rtf.observe((sent[-1][0] - submitted_at) * 1000.0 / deficit.received_ms)

    # -- exposition ---------------------------------------------------------------------------

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The body and content type for an ``Accept`` header (text format or OpenMetrics)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.prom), content_type

    def collect_state(self) -> Iterator[Metric]:
        """The gauges and counters read from the GPU and the registry at scrape time."""
        model = self.config.served_model
        gpu = self.gpu
        busy = int(gpu.running) if gpu is not None else 0
        queued = int(gpu.queued) if gpu is not None else 0
        slots = int(gpu.slots) if gpu is not None else 0
        kv = gpu.kv_usage(self.config.max_sessions) if gpu is not None else 0.0
        for name, doc, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", busy),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", queued),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv),
        ):
            family = GaugeMetricFamily(name, doc, labels=VLLM_LABELS)
            family.add_metric([model, STAGE, REPLICA], value)
            yield family
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=(*VLLM_LABELS, "finished_reason"),
        )
        for reason in ("stop", "abort"):
            success.add_metric([model, STAGE, REPLICA, reason], self._finished.get(reason, 0))
        yield success
        for name, doc, value in (
            (
                "vllm_omni:num_requests_running",
                "Number of requests currently running across all pipeline stages.",
                busy,
            ),
            (
                "vllm_omni:num_requests_waiting",
                "Number of requests waiting to be scheduled.",
                queued,
            ),
        ):
            family = GaugeMetricFamily(name, doc, labels=("model_name",))
            family.add_metric([model], value)
            yield family
        yield from self._duplex_state(model, slots)

    def _duplex_state(self, model: str, slots: int) -> Iterator[Metric]:
        """The duplex session state vLLM-Omni has no family for: ``duplexctl:`` names."""
        sessions = self.registry.sessions()
        in_grace = sum(1 for s in sessions if s.detached_at is not None and not s.finished)
        for name, doc, value in (
            (
                "duplexctl:duplex_sessions_active",
                "Duplex sessions holding an admission slot (open, in disconnect grace or closing).",
                self.registry.slots_held,
            ),
            (
                "duplexctl:duplex_sessions_in_grace",
                "Duplex sessions whose connection is gone, held for resume until the "
                "disconnect grace expires.",
                in_grace,
            ),
            (
                "duplexctl:duplex_sessions_max",
                "Admission limit: duplex sessions the server holds at most (max_sessions).",
                self.config.max_sessions,
            ),
            (
                "duplexctl:gpu_batch_slots",
                "Batch slots of the simulated GPU (0 = unlimited).",
                slots,
            ),
        ):
            family = GaugeMetricFamily(name, doc, labels=("model_name",))
            family.add_metric([model], value)
            yield family
        rejected = CounterMetricFamily(
            "duplexctl:duplex_admission_rejections",
            "Duplex session opens refused because every admission slot was held.",
            labels=("model_name", "reason"),
        )
        rejected.add_metric([model, "capacity"], self.registry.rejected)
        yield rejected


class _StateCollector:
    """Adapts :meth:`ServerMetrics.collect_state` to prometheus_client's collector protocol."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.collect_state()
