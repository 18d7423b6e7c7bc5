"""The behaviour figures on ``load``'s sessions: the same figures, added up across sessions
(HDR histograms for times, rates with their n), recovered against a known behaviour — and
degrading when the simulated GPU saturates, as a real model's do."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import pytest
from support.cli import invoke
from support.commands import duplexctl_cmd, serving
from support.engine import Harness, turn_config

from duplexctl.audio.manifest import DEFAULT_DIR as RECORDINGS
from duplexctl.server.behaviour import Behaviour
from duplexctl.server.config import ServerConfig
from duplexctl.server.model import SimulatedGpu

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(300)]


def _load(url: str, scenario: str, out: Path, *args: str) -> dict:
    cmd = duplexctl_cmd("load", str(RECORDINGS / scenario), "--url", url)
    cmd += ["--workers", "1", "--plain", "--out", str(out), "--prebuffer-ms", "0"]
    cmd += ["--turn-detection", "server_vad", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "behaviour: " in done.stdout
    return dict(json.loads((out / "report.json").read_text()))


@pytest.mark.slow
@pytest.mark.timing
def test_stop_latency_and_takeover_rate_under_load(tmp_path: Path) -> None:
    with serving("--max-sessions", "8", "--behaviour", "stop-latency-ms=300") as url:
        stops = _load(url, "interruption.toml", tmp_path / "i", "--sessions", "3", "--count", "3")
    with serving("--max-sessions", "8", "--behaviour", "takeover-on-pause=0.5") as url:
        pauses = _load(
            url,
            "pause.toml",
            tmp_path / "p",
            "--sessions",
            "5",
            "--count",
            "5",
            "--vad-silence-ms",
            "2000",
        )
    stop = stops["figures"]["stop_latency_ms"]
    assert stop["n"] == 3 and stops["behaviour"]["interruptions"] == 3
    assert stop["min"] >= 270.0 and stop["max"] <= 330.0, stop
    assert stops["behaviour"]["no_response_rate"] == 0.0
    b = pauses["behaviour"]
    assert b["pause_trials"] == 50
    assert b["takeover_rate"] == b["takeovers"] / 50
    assert 14 <= b["takeovers"] <= 36  # Binomial(50, 0.5), two-sided 99.9 %
    assert pauses["scalars"]["takeover_rate"] == b["takeover_rate"]
    # saved runs merge exactly: the counts add up, the rates are recomputed from them
    cmd = duplexctl_cmd("report", str(tmp_path / "i"), str(tmp_path / "p"), "--json")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    merged = json.loads(done.stdout)["behaviour"]
    assert merged["pause_trials"] == 50 and merged["interruptions"] == 3
    assert merged["turn_ends"] == stops["behaviour"]["turn_ends"] + b["turn_ends"]
    assert merged["takeover_rate"] == b["takeover_rate"]


def test_a_reaction_unit_finishes_on_time_when_idle_and_late_when_the_slot_is_held() -> None:
    """``SimulatedGpu.finish_by``: never before its instant; when the only slot is held it
    waits for it (lower bounds only: a busy machine can only make it later)."""

    async def scenario() -> tuple[float, float, float]:
        gpu = SimulatedGpu(ServerConfig(gpu_slots=1, unit_compute_ms=200.0))
        t0 = time.monotonic()
        await gpu.finish_by(t0 + 0.5)  # asks at 0.3 s, computes until 0.5 s
        idle = time.monotonic() - t0
        t1 = time.monotonic()
        holder = asyncio.create_task(gpu.run_unit())  # holds the only slot until 0.2 s
        await asyncio.sleep(0)
        waited, _ = await gpu.finish_by(t1 + 0.2)  # asks at 0 s, gets the slot at 0.2 s
        held = time.monotonic() - t1
        await holder
        return idle, held, waited

    idle, held, waited = asyncio.run(scenario())
    assert idle >= 0.5
    assert held >= 0.2 + 0.2 and waited >= 150.0  # its instant + the holder's 200 ms


def test_a_closed_session_gives_back_the_slot_its_noticing_unit_waits_for() -> None:
    """The unit that would stop an interrupted answer is still queued for the only batch
    slot when the session closes: it leaves the queue at once (nothing outlives its
    session), it does not hold a slot for a session that is gone."""

    async def scenario() -> tuple[int, int]:
        behaviour = Behaviour(stop_latency_ms=100.0)
        h = Harness(turn_config(gpu_slots=1, unit_compute_ms=2000.0, behaviour=behaviour), None)
        h.start()
        gpu = h.session._overlap._gpu
        holder = asyncio.create_task(gpu.run_unit())  # another session's unit: 2 s
        await asyncio.sleep(0)
        h.session._overlap.vad_barge_in(100.0, onset_ms=0.0)  # its instant has passed
        await asyncio.sleep(0.05)
        queued = gpu.queued
        await h.session.close("test")
        await asyncio.sleep(0.05)
        holder.cancel()
        return queued, gpu.queued

    before, after = asyncio.run(scenario())
    assert (before, after) == (1, 0)


#: the saturation test's server: two batch slots, 300 ms per unit, 2 s units (the answer's
#: first unit covers the interruption: a late second unit cannot fake an early stop), stop
#: 500 ms, gap 1500 ms (longer than the server VAD's 800 ms silence window, so the gap, not
#: the commit, decides)
SATURATING = ("--gpu-slots", "2", "--unit-compute-ms", "300", "--output-chunk-ms", "2000")
STOP_MS, GAP_MS = 500.0, 1500.0


@pytest.mark.slow
@pytest.mark.timing
def test_stop_latency_and_response_gap_grow_when_the_gpu_saturates(tmp_path: Path) -> None:
    """One session on two batch slots gets the configured behaviour back; eight sessions
    queue for the slots, and the model notices the interruption (one unit) late, so it
    keeps speaking hundreds of ms longer, and the first answers after a turn end wait for
    their slots. Without the GPU rule (plain timers) the eight-session stop latencies stay
    at 500 ms and this fails."""
    behaviour = f"stop-latency-ms={STOP_MS:g},response-gap-ms={GAP_MS:g}"
    runs = {}
    for sessions in ("1", "8"):
        with serving(*SATURATING, "--max-sessions", "16", "--behaviour", behaviour) as url:
            runs[sessions] = _load(
                url,
                "interruption.toml",
                tmp_path / sessions,
                "--sessions",
                sessions,
                "--count",
                "2" if sessions == "1" else sessions,
            )
    idle, full = runs["1"]["figures"], runs["8"]["figures"]
    assert idle["stop_latency_ms"]["n"] == 2 and full["stop_latency_ms"]["n"] == 8
    # below saturation: the configured values, within 40 ms
    assert idle["stop_latency_ms"]["min"] >= STOP_MS - 30, idle
    assert idle["stop_latency_ms"]["max"] <= STOP_MS + 40, idle
    assert idle["response_gap_ms"]["min"] >= GAP_MS - 30, idle
    assert idle["response_gap_ms"]["max"] <= GAP_MS + 40, idle
    # at saturation: never faster than configured, and on the whole far slower (measured:
    # stop latency 630-3090 ms, mean 1680; response gap up to 2040 ms; an answer still
    # speaking at the user's next turn end gives a negative gap, so no lower bound there)
    assert full["stop_latency_ms"]["min"] >= STOP_MS - 30, full
    assert full["stop_latency_ms"]["mean"] >= STOP_MS + 200, full
    assert full["response_gap_ms"]["max"] >= GAP_MS + 300, full


def test_load_refuses_a_pause_its_server_vad_would_end() -> None:
    done = invoke(
        "load", str(RECORDINGS / "pause.toml"), "--sessions", "1", "--count", "1",
        "--turn-detection", "server_vad", "--vad-silence-ms", "1000",
    )  # fmt: skip
    assert done.code == 2
    assert done.stderr.strip() == (
        f"duplexctl: error: {RECORDINGS / 'pause.toml'}: step 2: pause: 1500 ms would end the "
        "turn: server VAD commits after 1000 ms of silence (use a shorter pause or a longer "
        "vad_silence_ms)"
    )
