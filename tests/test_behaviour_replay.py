"""The behaviour figures of ``replay``, proven against the reference model's known behaviour.

A real ``duplexctl serve`` process is told how to behave (``--behaviour``: the ground
truth); real ``duplexctl replay`` processes run the bundled scenarios against it over
loopback; the figures read off the two channels must give the truth back: stop latency and
response gap within 30 ms, the takeover rate within its binomial interval over 50 trials.
Every assertion would fail without the behaviour (the server's defaults give other values)
or without the figure (no ``behaviour`` section).
"""

from __future__ import annotations

import json
import math
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from support.cli import invoke, one_line
from support.commands import duplexctl_cmd, free_port, serving

from duplexctl.audio.manifest import DEFAULT_DIR as RECORDINGS
from duplexctl.behaviour.activity import voice_activity

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(300)]


def replay(url: str, scenario: str, *args: str) -> tuple[int, dict[str, Any]]:
    """One ``duplexctl replay --json`` process; its exit code and report."""
    cmd = duplexctl_cmd("replay", str(RECORDINGS / scenario))  # bundled, or a path
    cmd += ["--url", url, "--json", "--prebuffer-ms", "0", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.timing
def test_stop_latency_is_the_models_within_30_ms() -> None:
    for truth, code_expected in ((300.0, 0), (600.0, 1)):
        with serving("--behaviour", f"stop-latency-ms={truth:g}") as url:
            code, report = replay(url, "interruption.toml")
        figures = report["behaviour"]
        assert figures["interruptions"] == 1
        assert abs(figures["stop_latency_ms"] - truth) <= 30.0, figures
        # both spoke from the onset until the assistant stopped, but for the user's own gaps
        overlapped = figures["trials"]["interrupt_overlap_ms"][0]
        assert 0 < overlapped <= figures["stop_latency_ms"]
        # the scenario's [expect] stop_latency_ms = "<400" holds for 300, fails for 600
        assert code == code_expected, report["expectations"]


@pytest.mark.slow
@pytest.mark.timing
def test_response_gap_is_the_models_within_30_ms() -> None:
    with serving("--behaviour", "response-gap-ms=1000") as url:
        code, report = replay(url, "turn_taking.toml")
    figures = report["behaviour"]
    assert code == 0, report["expectations"]
    assert figures["turn_ends"] == 2 and figures["no_response_rate"] == 0
    gaps = figures["trials"]["response_gaps_ms"]
    assert len(gaps) == 2 and all(abs(g - 1000.0) <= 30.0 for g in gaps), gaps


def _binomial_tail(n: int, k: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


@pytest.mark.slow
def test_takeover_rate_within_its_binomial_interval_over_50_pauses() -> None:
    p, runs = 0.5, 5  # 5 concurrent sessions x 10 pauses = 50 independent trials
    behaviour = f"takeover-on-pause={p}"
    with (
        serving("--max-sessions", str(runs), "--behaviour", behaviour) as url,
        ThreadPoolExecutor(runs) as pool,
    ):
        results = list(pool.map(lambda _: replay(url, "pause.toml"), range(runs)))
    trials = sum(r["behaviour"]["pause_trials"] for _, r in results)
    takeovers = sum(r["behaviour"]["trials"]["takeovers"] for _, r in results)
    assert trials == 50
    # a two-sided 99.9 % acceptance region of Binomial(50, 0.5): [14, 36]
    assert _binomial_tail(trials, takeovers, p) > 0.0005
    assert 1 - _binomial_tail(trials, takeovers - 1, p) > 0.0005
    for code, report in results:
        figures = report["behaviour"]
        assert figures["takeover_rate"] == figures["trials"]["takeovers"] / 10
        # [expect] takeover = false: holds exactly in the runs without a takeover
        assert code == (1 if figures["takeover"] else 0), report["expectations"]


@pytest.mark.slow
def test_a_polite_model_never_takes_over() -> None:
    with serving() as url:
        code, report = replay(url, "pause.toml")
    figures = report["behaviour"]
    assert code == 0 and figures["pause_trials"] == 10
    assert figures["takeover"] is False and figures["takeover_rate"] == 0.0
    assert figures["no_response_rate"] == 0.0  # the real end of the turn is answered


def test_a_pause_the_server_vad_would_end_is_2_with_one_line(tmp_path: Path) -> None:
    scenario = tmp_path / "p.toml"
    scenario.write_text(
        '[settings]\nturn_detection = "server_vad"\nvad_silence_ms = 800\n'
        f'[[step]]\naction = "say"\nfile = "{RECORDINGS / "short_ack.wav"}"\n'
        f'[[step]]\naction = "pause"\nms = 800\nfile = "{RECORDINGS / "short_ack.wav"}"\n'
    )
    done = invoke("replay", str(scenario), "--url", f"ws://127.0.0.1:{free_port()}/v1")
    assert done.code == 2
    assert done.stderr.strip() == (
        f"duplexctl: error: {scenario}: step 2: pause: 800 ms would end the turn: server VAD commits "
        "after 800 ms of silence (use a shorter pause or a longer vad_silence_ms)"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("takeover-on-pause=1.5", "is a probability"),
        ("stop-latency-ms=-1", "must be a finite number >= 0"),
        ("response-gap-ms", "needs a value"),
        ("backchannel=2", "unknown behaviour 'backchannel'"),
    ],
)
def test_bad_behaviour_is_2_with_one_line(spec: str, message: str) -> None:
    done = invoke("serve", "--port", "0", "--behaviour", spec)
    assert done.code == 2
    assert message in one_line(done.stderr)


def _sample(folder: Path) -> tuple[Any, Any, int]:
    user, rate = sf.read(str(folder / "input.wav"), dtype="float32")
    model, rate_out = sf.read(str(folder / "output.wav"), dtype="float32")
    assert rate == rate_out == 16000 and user.shape == model.shape
    return user, model, rate


@pytest.mark.slow
def test_full_duplex_bench_export_has_one_sample_per_event(tmp_path: Path) -> None:
    """``--out`` also writes Full-Duplex-Bench's layout; each pause sample's output holds the
    takeover (more than 1 s of speech starting inside the pause its pause.json names)."""
    with serving("--behaviour", "takeover-on-pause=1") as url:
        replay(url, "pause.toml", "--out", str(tmp_path / "p"))
        code, _ = replay(url, "interruption.toml", "--out", str(tmp_path / "i"))
    assert code == 0
    pauses = sorted((tmp_path / "p" / "full_duplex_bench" / "pause_handling").iterdir())
    assert len(pauses) == 10
    for folder in pauses:
        _, model, rate = _sample(folder)
        ((mark,),) = [json.loads((folder / "pause.json").read_text())]
        assert mark["text"] == "[PAUSE]"
        start_s, end_s = mark["timestamp"]
        spoken = voice_activity(model, rate)
        assert any(
            start_s * 1000 <= seg.start_ms <= end_s * 1000 and seg.duration_ms > 1000
            for seg in spoken
        ), (folder, spoken, mark)
    assert (tmp_path / "p" / "full_duplex_bench" / "smooth_turn_taking" / "1").is_dir()
    folder = tmp_path / "i" / "full_duplex_bench" / "user_interruption" / "1"
    _sample(folder)
    (meta,) = json.loads((folder / "interrupt.json").read_text())
    assert meta["context"].startswith("Hello there.")
    assert meta["interrupt"].startswith("Wait, stop.")
    assert 0 < meta["timestamp"][0] < meta["timestamp"][1]
    # the sample holds the question: all of hello.wav's speech (2.88 s) before the onset
    assert meta["timestamp"][0] >= 2.88, meta


def _poisson_cdf(k: int, mean: float) -> float:
    return sum(math.exp(-mean) * mean**i / math.factorial(i) for i in range(k + 1))


@pytest.mark.slow
def test_backchannels_per_minute_within_their_poisson_interval(tmp_path: Path) -> None:
    """40 s of continuous voiced sound in one turn: the model backchannels 30 times a minute
    of it; the count read off the channels lies in the Poisson interval of that rate over
    the user speech the channels hold (the model skips the time its own backchannel plays,
    about 400 ms each: a bias of a few percent, well inside the interval)."""
    rate, seconds = 16000, 40.0
    t = np.arange(int(seconds * rate)) / rate
    voiced = (0.1 * np.sin(2 * np.pi * 180 * t) * (1 + 0.3 * np.sin(2 * np.pi * 3 * t))).astype(
        np.float32
    )
    wav = tmp_path / "long.wav"
    sf.write(str(wav), np.concatenate([np.zeros(4800), voiced, np.zeros(rate)]), rate)
    scenario = tmp_path / "long.toml"
    scenario.write_text(
        '[settings]\nturn_detection = "server_vad"\n'
        f'[[step]]\naction = "say"\nfile = "{wav}"\n[[step]]\naction = "wait"\n'
        '[expect]\nbackchannels = ">=1"\n'
    )
    with serving("--behaviour", "backchannel-rate=30") as url:
        code, report = replay(url, str(scenario))
    figures = report["behaviour"]
    assert code == 0, report["expectations"]
    expected = 30.0 * figures["user_speech_ms"] / 60000.0
    assert figures["user_speech_ms"] >= 39000
    k = figures["backchannels"]
    assert _poisson_cdf(k, expected) > 0.0005 and 1 - _poisson_cdf(k - 1, expected) > 0.0005, (
        k,
        expected,
    )
    assert figures["no_response_rate"] == 0.0  # backchannels answer no turn: the end is answered


@pytest.mark.slow
def test_a_model_that_never_backchannels_fails_the_expectation() -> None:
    with serving() as url:
        code, report = replay(url, "backchannel.toml")
    assert report["behaviour"]["backchannels"] == 0
    assert code == 1
    assert [f["name"] for f in report["expectations"]["failed"]] == ["backchannels"]


def test_fast_pace_has_no_conversation_to_read() -> None:
    with serving() as url:
        code, report = replay(url, "turn_taking.toml", "--pace", "fast")
    assert "behaviour" not in report
    failed = report["expectations"]["failed"]
    assert code == 1 and {f["name"] for f in failed} == {"response_gap_ms", "no_response_rate"}
