"""The model-native lane (auto_response true, MiniCPM-o-like) and the simulated GPU."""

from __future__ import annotations

import asyncio
import time

import numpy as np
from support.engine import Harness, pcm16, turn_config

from duplexctl.server.config import Fault, ServerConfig
from duplexctl.server.model import SimulatedGpu, SimulatedModel, load_factor

SPEECH = pcm16(100, level=0.3)
SILENCE = pcm16(100)
NATIVE = {
    "modalities": ["audio", "text"],
    "turn_detection": None,
    "extra_body": {"auto_response": True},
}


def native_config(**overrides: object) -> ServerConfig:
    values: dict[str, object] = {
        "model_profile": "native",
        "chunk_ms": 1000,
        "ttfa_ms": 50.0,
        "reply_seconds": 2.0,
        "realtime_factor": 0.0,
        "seed": 3,
    }
    values.update(overrides)
    return ServerConfig(**values)  # type: ignore[arg-type]


async def stream(h: Harness, audio: str, n: int) -> None:
    for _ in range(n):
        await h.send({"type": "input_audio_buffer.append", "audio": audio})


def listens(h: Harness) -> list[str]:
    return [e["response"]["metadata"]["reason"] for e in h.of("response.listen")]


async def test_native_listens_then_speaks_after_a_silent_unit() -> None:
    h = Harness(native_config(), NATIVE)
    h.start()
    await stream(h, SILENCE, 11)  # nobody spoke: one model_listen per 1 s unit
    assert listens(h) == ["model_listen"]
    await stream(h, SPEECH, 20)
    assert listens(h) == ["model_listen"] * 3
    assert h.of("input_audio_buffer.speech_started")
    assert not h.of("response.created")
    await stream(h, SILENCE, 10)  # this unit still holds 30 ms of speech
    assert listens(h) == ["model_listen"] * 4
    await stream(h, SILENCE, 10)  # the first silent unit: the model speaks
    assert len(h.of("response.created")) == 1
    await h.wait_for("response.done")
    types = h.types()
    start = types.index("response.created")
    assert types[start + 5 : start + 8] == [
        "response.speak",
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
    ]
    deltas = h.of("response.output_audio_transcript.delta")
    full = h.of("response.output_audio_transcript.done")[0]["transcript"]
    assert "".join(d["delta"] for d in deltas) == full  # text rides the audio units
    assert h.of("response.done")[0]["response"]["status"] == "completed"


async def test_native_speech_over_the_answer_ends_it_completed() -> None:
    h = Harness(native_config(realtime_factor=1.0, reply_seconds=4.0), NATIVE)
    h.start()
    await stream(h, SPEECH, 11)
    await stream(h, SILENCE, 20)
    await h.wait_for("response.output_audio.delta")
    await stream(h, SPEECH, 10)
    done = h.of("response.done")[0]["response"]
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["audio_duration_ms"] < 4000
    assert listens(h)[-1] == "model_listen"
    assert not h.of("overlap.decision")  # listen_only: the model yields by itself


async def test_native_server_vad_barge_in() -> None:
    obj = {**NATIVE, "turn_detection": {"type": "server_vad", "silence_duration_ms": 300}}
    h = Harness(native_config(realtime_factor=1.0, reply_seconds=4.0), obj)
    h.start()
    await stream(h, SPEECH, 11)
    await stream(h, SILENCE, 20)
    await h.wait_for("response.output_audio.delta")
    assert not h.of("input_audio_buffer.committed")  # VAD never commits in this lane
    await stream(h, SILENCE, 1)
    assert h.of("overlap.decision")[-1]["reason"] == "auto_response_continuous"
    await stream(h, SPEECH, 3)
    decision = next(d for d in h.of("overlap.decision") if d["action"] == "barge_in")
    assert decision["metadata"]["cancel_reason"] == "turn_detected"
    assert h.of("response.done")[0]["response"]["status_details"]["reason"] == "turn_detected"


async def test_native_fail_append_every_and_orphan_response() -> None:
    async def run(faults: list[Fault]) -> Harness:
        # the first unit closes at 1030 ms (append 11), the second one (still holding 70 ms
        # of speech) at append 21, the first silent one at append 31: the model speaks on
        # the 31st append, which fails with N=31
        h = Harness(native_config(faults=faults), NATIVE)
        h.start()
        await stream(h, SPEECH, 11)
        await stream(h, SILENCE, 20)
        await asyncio.sleep(0.2)
        return h

    h = await run([Fault("fail-append-every", 31)])
    assert h.codes() == ["runtime_append_failed"]
    assert h.of("response.done")[0]["response"]["status"] == "failed"
    h = await run([Fault("fail-append-every", 31), Fault("orphan-response")])
    assert h.codes() == ["runtime_append_failed"]
    assert h.of("response.created") and not h.of("response.done")
    # orphan-response on its own: the append the model speaks on fails, the response is
    # left open; without any fault the same input is answered to the end
    h = await run([Fault("orphan-response")])
    assert h.codes() == ["runtime_append_failed"]
    assert h.of("response.created") and not h.of("response.done")
    h = await run([])
    assert h.codes() == []
    await h.wait_for("response.done")
    assert h.of("response.done")[0]["response"]["status"] == "completed"


def test_load_factor_documented_values() -> None:
    assert load_factor(1) == 1.0 and round(load_factor(4), 3) == 1.3


async def test_gpu_contention_grows_time_to_first_audio() -> None:
    """With one slot and 100 ms per unit, the second of two concurrent replies waits."""
    config = ServerConfig(
        gpu_slots=1,
        unit_compute_ms=100.0,
        ttfa_ms=0.0,
        chunk_ms=200,
        reply_seconds=0.4,
        realtime_factor=0.0,
    )
    gpu = SimulatedGpu(config)
    audio = np.zeros(9600, dtype=np.float32)

    async def first_audio() -> float:
        start = time.monotonic()
        async for _chunk in SimulatedModel(config).stream(audio, gpu, submitted_at=start):
            return time.monotonic() - start
        raise AssertionError("no output")

    alone = await first_audio()
    together = sorted(await asyncio.gather(first_audio(), first_audio()))
    assert alone < 0.2
    assert together[1] > together[0] + 0.05  # queued behind the other session's unit
    assert gpu.units >= 3


async def test_realtime_pacing_and_latency_fault() -> None:
    config = ServerConfig(
        chunk_ms=100,
        reply_seconds=0.3,
        ttfa_ms=50.0,
        realtime_factor=1.0,
        faults=[Fault("latency-ms", 50)],
    )
    model = SimulatedModel(config)
    start = time.monotonic()
    stamps = [
        time.monotonic() - start
        async for _ in model.stream(
            np.zeros(7200, np.float32), SimulatedGpu(config), submitted_at=start
        )
    ]
    assert len(stamps) == 3
    assert stamps[0] >= 0.095  # ttfa 50 + latency 50
    assert stamps[2] - stamps[0] >= 0.28  # period 100 + 50 per chunk


def test_ttfa_jitter_is_seeded() -> None:
    config = ServerConfig(ttfa_ms=100.0, ttfa_jitter_ms=50.0, seed=7)
    a = [SimulatedModel(config).ttfa_s() for _ in range(2)]
    assert a[0] == a[1] and 0.1 <= a[0] <= 0.15


def test_echo_voice_returns_the_user_at_24k() -> None:
    model = SimulatedModel(turn_config(voice="echo"))
    user = np.ones(16000, dtype=np.float32) * 0.1
    assert model.reply_audio(user).size == 24000
    assert model.reply_audio(None).size == 2 * 24000  # no utterance: tone
