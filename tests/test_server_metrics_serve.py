"""``duplexctl serve`` answers ``GET /metrics`` under vLLM / vLLM-Omni 0.30's own names and
tells the truth about its simulated GPU and its duplex sessions (issue 19).

The reference for the names is an exposition produced by vLLM's and vLLM-Omni's own metric
classes (tests/fixtures/server_metrics/README.md says how it was generated); the state is
read back over real HTTP on loopback while real work occupies the server.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path

import numpy as np
from support.server import OPEN_SESSION, dial, open_session, recv_until, running, send, ws_url

from duplexctl.audio import pcm
from duplexctl.prometheus.exposition import Family, parse
from duplexctl.protocol import ids
from duplexctl.server.model import SimulatedGpu, SimulatedModel

FIXTURE = Path(__file__).parent / "fixtures" / "server_metrics" / "vllm_0.30_exposition.txt"


def _by_name(families: list[Family]) -> dict[str, Family]:
    return {f.name: f for f in families}


def _label_names(family: Family) -> set[str]:
    return {k for s in family.samples for k in s.labels if k != "le"}


def _value(families: dict[str, Family], series: str, **labels: str) -> float:
    for family in families.values():
        for s in family.samples:
            if s.name == series and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"no sample {series} {labels}")


async def _scrape(port: int, accept: str | None = None) -> tuple[str, list[Family]]:
    def get() -> tuple[str, list[Family]]:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
        if accept:
            request.add_header("Accept", accept)
        with urllib.request.urlopen(request, timeout=10) as resp:
            content_type = resp.headers["Content-Type"]
            return content_type, parse(resp.read(), content_type)

    return await asyncio.to_thread(get)


def test_the_parser_reads_an_exposition_made_by_vllms_own_classes() -> None:
    families = _by_name(parse(FIXTURE.read_bytes(), "text/plain; version=0.0.4"))
    assert families["vllm:num_requests_waiting"].type == "gauge"
    assert _value(families, "vllm:num_requests_waiting", stage="0") == 9.0
    assert _value(families, "vllm:kv_cache_usage_perc") == 0.93
    ttft = families["vllm:time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    assert {s.name for s in ttft.samples} >= {
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_count",
    }
    assert _value(families, "vllm_omni:audio_ttfp_s_count", stage="0") == 1.0
    assert families["vllm:request_success"].type == "counter"


async def test_serve_exposes_vllm_names_types_labels_and_help_exactly() -> None:
    reference = _by_name(parse(FIXTURE.read_bytes()))
    async with running("real") as server:
        content_type, families = await _scrape(server.port)
    assert content_type.startswith("text/plain")
    ours = {f.name: f for f in families}
    vllm_named = [n for n in ours if n.startswith(("vllm:", "vllm_omni:"))]
    assert len(vllm_named) >= 9
    for name in vllm_named:
        assert name in reference, f"{name} is not a vLLM 0.30 / vLLM-Omni 0.30 family"
        assert ours[name].type == reference[name].type, name
        assert ours[name].help == reference[name].help, name
        assert _label_names(ours[name]) == _label_names(reference[name]), name
    rest = set(ours) - set(vllm_named)
    assert rest and all(n.startswith("duplexctl:") for n in rest), rest
    assert all(ours[n].help for n in rest)


async def test_openmetrics_is_served_when_asked() -> None:
    async with running("real") as server:
        content_type, families = await _scrape(server.port, "application/openmetrics-text")
    assert content_type.startswith("application/openmetrics-text")
    assert len(families) >= 10


async def test_the_gauges_tell_the_simulated_gpu_and_the_sessions_truthfully() -> None:
    async with running("real", gpu_slots=1, unit_compute_ms=400.0, max_sessions=1) as server:
        gpu = server.registry.engine.gpu
        assert isinstance(gpu, SimulatedGpu)
        units = [asyncio.create_task(gpu.run_unit()) for _ in range(4)]
        await asyncio.sleep(0.1)  # one unit computing, three queued for the slot
        _, busy = await _scrape(server.port)
        state = _by_name(busy)
        assert _value(state, "vllm:num_requests_running") == 1.0
        assert _value(state, "vllm:num_requests_waiting") == 3.0
        assert _value(state, "vllm_omni:num_requests_waiting") == 3.0
        assert _value(state, "vllm:kv_cache_usage_perc") == 1.0
        await asyncio.gather(*units)
        _, idle = await _scrape(server.port)
        assert _value(_by_name(idle), "vllm:num_requests_waiting") == 0.0
        assert _value(_by_name(idle), "vllm:kv_cache_usage_perc") == 0.0

        first = await dial(ws_url(server))
        opening = {"type": "session.update", "session": OPEN_SESSION}
        await send(first, {**opening, "event_id": ids.client_event_id()})
        await first.recv()
        second = await dial(ws_url(server))  # max_sessions=1: refused
        await send(second, {**opening, "event_id": ids.client_event_id()})
        await second.recv()
        await second.close()
        _, held = await _scrape(server.port)
        state = _by_name(held)
        assert _value(state, "duplexctl:duplex_sessions_active") == 1.0
        assert _value(state, "duplexctl:duplex_sessions_in_grace") == 0.0
        assert _value(state, "duplexctl:duplex_admission_rejections_total") == 1.0
        first.transport.abort()  # gone without session.close: held in disconnect grace
        for _ in range(50):
            await asyncio.sleep(0.05)
            _, graced = await _scrape(server.port)
            if _value(_by_name(graced), "duplexctl:duplex_sessions_in_grace") == 1.0:
                break
        else:
            raise AssertionError("the dropped session never showed in disconnect grace")


async def test_a_reply_is_observed_in_the_latency_histograms() -> None:
    async with running("real", gpu_slots=1, unit_compute_ms=50.0, ttfa_ms=100.0) as server:
        gpu = server.registry.engine.gpu
        model = SimulatedModel(server.registry.config)
        chunks = [
            c
            async for c in model.stream(
                np.zeros(24000 * 2, np.float32), gpu, submitted_at=time.monotonic()
            )
        ]
        assert chunks[-1].last
        _, families = await _scrape(server.port)
    state = _by_name(families)
    assert _value(state, "vllm:time_to_first_token_seconds_count") == 1.0
    assert _value(state, "vllm:time_to_first_token_seconds_sum") >= 0.1
    assert _value(state, "vllm_omni:audio_ttfp_s_count") == 1.0
    assert _value(state, "vllm:e2e_request_latency_seconds_count") == 1.0
    assert _value(state, "vllm:request_queue_time_seconds_count") == 1.0
    assert _value(state, "vllm:request_success_total", finished_reason="stop") == 1.0


async def test_a_default_server_counts_the_reply_it_is_speaking() -> None:
    """Unlimited slots (the default): the reply in progress is a running request and fills
    the KV cache by one admission slot's share, so a default run's server row and charts are
    not flat zero while it speaks; both fall back to 0 when the reply is over."""
    speech = pcm.b64encode(pcm.encode(np.full(2400, 0.3, np.float32), "pcm16"))
    async with running("real", max_sessions=4, reply_seconds=2.0) as server:
        ws, _created, _updated = await open_session(server)
        for _ in range(3):
            await send(ws, {"type": "input_audio_buffer.append", "audio": speech})
        await send(ws, {"type": "input_audio_buffer.commit", "response_create": True})
        await recv_until(ws, "response.output_audio.delta", timeout=10)
        _, speaking = await _scrape(server.port)
        state = _by_name(speaking)
        assert _value(state, "vllm:num_requests_running") >= 1.0
        assert _value(state, "vllm_omni:num_requests_running") >= 1.0
        assert _value(state, "vllm:kv_cache_usage_perc") == 0.25  # 1 of 4 admission slots
        await recv_until(ws, "response.done", timeout=10)
        _, done = await _scrape(server.port)
        assert _value(_by_name(done), "vllm:num_requests_running") == 0.0
        assert _value(_by_name(done), "vllm:kv_cache_usage_perc") == 0.0
        await ws.close()
