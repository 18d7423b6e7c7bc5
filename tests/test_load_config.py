"""LoadConfig and --mix: validated before any socket opens; worker shares add up."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.loadconfig import load_config

from duplexctl.audio import pcm
from duplexctl.audio.pacer import MicQueue
from duplexctl.errors import BadInput
from duplexctl.load.config import Mix
from duplexctl.load.engine import make_plan
from duplexctl.load.script import AppendCache, build_script
from duplexctl.scenario.config import CliOptions, resolve
from duplexctl.scenario.parse import load_inputs


def test_mix_parses_and_picks_by_cumulative_probability() -> None:
    mix = Mix.parse("barge_in=0.2, cancel=0.1,drop_resume=0.05")
    assert (mix.barge_in, mix.cancel, mix.drop_resume) == (0.2, 0.1, 0.05)
    assert mix.pick(0.0) == "barge_in" and mix.pick(0.25) == "cancel"
    assert mix.pick(0.32) == "drop_resume" and mix.pick(0.36) is None
    assert str(mix) == "barge_in=0.2,cancel=0.1,drop_resume=0.05"
    assert Mix.parse(None).total == 0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("barge=0.1", "unknown behaviour"),
        ("cancel", "not name=probability"),
        ("cancel=x", "not a number"),
        ("cancel=1.5", "not a probability"),
        ("cancel=0.6,barge_in=0.6", "add up to"),
    ],
)
def test_bad_mix_is_one_line(text: str, problem: str) -> None:
    with pytest.raises(BadInput, match=problem):
        Mix.parse(text)


@pytest.mark.parametrize(
    ("kw", "problem"),
    [
        ({}, "--sessions N"),
        ({"sessions": 2, "rate": 1.0, "duration_s": 1}, "exclude each other"),
        ({"sessions": 2}, "--duration or --count"),
        ({"rate": 1.0, "duration_s": 1, "burstiness": 2.0}, "gamma only"),
        ({"sessions": 1, "duration_s": 1, "slos": ["ttfa_p95<=x"]}, "SLO"),
        ({"sessions": 1, "duration_s": 1, "ramp": "0:1,bad"}, "ramp"),
        ({"sessions": 1, "duration_s": 1, "url": "http://x"}, "ws://"),
        ({"sessions": 1, "duration_s": 1, "inputs": ["/nonexistent.wav"]}, "no such file"),
        ({"sessions": 1, "duration_s": 1, "send_phases": 0}, "--send-phases must be between"),
        ({"sessions": 1, "duration_s": 1, "chunk_ms": 20, "send_phases": 40}, r"chunk \(20 ms\)"),
    ],
)
def test_validate_refuses_bad_runs(kw: dict, problem: str) -> None:
    with pytest.raises(BadInput, match=problem):
        load_config(**kw).validate()


def test_shares_add_up_and_get_distinct_seeds() -> None:
    cfg = load_config(
        sessions=7, count=5, max_concurrency=3, seed=10, duration_s=1, ramp="0:0,10s:4"
    )
    parts = [cfg.share(i, 3) for i in range(3)]
    assert sum(p.shape.sessions or 0 for p in parts) == 7
    assert sum(p.shape.count or 0 for p in parts) == 5
    assert len({p.shape.seed for p in parts}) == 3
    assert all(p.execution.workers == 1 for p in parts)
    rate = load_config(rate=9.0, duration_s=1).share(1, 3)
    assert rate.shape.rate == pytest.approx(3.0)
    assert "api_key" not in load_config(api_key="secret").echo()


def test_bundled_script_and_append_cache() -> None:
    script = build_script([])
    assert script.turns >= 2 and script.interrupt.name == "interrupt.wav"
    utt = next(iter(script.clips.values()))
    cache = AppendCache()
    clip = utt.clip.samples
    texts = []
    for _ in range(2):  # two sessions' microphones speaking the same clip
        mic = MicQueue(16000)
        mic.play(clip)
        chunks = [mic.read(1600) for _ in range(clip.size // 1600 + 1)]
        texts.append([cache.encode(*c) for c in chunks])
    assert all(a is b for a, b in zip(texts[0][:-1], texts[1][:-1], strict=True))  # cached
    *views, edge = chunks
    assert all(origin is not None and origin[0] is clip for _, _, origin in views)
    assert edge[2] is None  # assembled across the clip's end: encoded each time, same text
    assert texts[0][-1] == texts[1][-1] and texts[0][-1] is not texts[1][-1]
    for (samples, _, _), text in zip(chunks, texts[0], strict=True):
        assert text == pcm.b64encode(pcm.encode(samples, "pcm16"))
    silence = np.zeros(1600, dtype=np.float32)
    assert cache.encode(silence, True) is cache.encode(silence, True)


# --- settings: the one resolver (issue 15.1) ------------------------------------------------

HELLO = Path(__file__).resolve().parent.parent / "recordings" / "hello.wav"


def scenario_file(tmp_path: Path, settings: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(
        f'[settings]\n{settings}\n[[step]]\naction = "say"\nfile = "{HELLO}"\n'
        '[[step]]\naction = "wait"\n'
    )
    return path


def test_an_explicit_flag_beats_the_scenario_even_at_the_default_value(tmp_path: Path) -> None:
    """LoadConfig.chunk_ms defaulted to 100, so "not given" and "--chunk-ms 100" looked the
    same and the scenario's 200 won over the flag (prebuffer and response timeout alike)."""
    path = scenario_file(tmp_path, "chunk_ms = 200\nprebuffer_ms = 30\nresponse_timeout_s = 9")
    flags = load_config(
        inputs=[str(path)], chunk_ms=100, prebuffer_ms=0.0, response_timeout_s=20.0, count=1
    )
    plan = make_plan(flags)
    assert (plan.replay.chunk_ms, plan.replay.prebuffer_ms, plan.replay.response_timeout_s) == (
        100,
        0.0,
        20.0,
    )
    scenario = load_config(inputs=[str(path)], count=1)
    plan = make_plan(scenario)
    assert (plan.replay.chunk_ms, plan.replay.prebuffer_ms, plan.replay.response_timeout_s) == (
        200,
        30.0,
        9.0,
    )
    # what run.py hands the report (validity.chunk_ms, invalid_pacing) is the chunk used
    assert scenario.chunk_ms == 200 and scenario.echo()["chunk_ms"] == 200
    assert scenario.echo()["origin"]["chunk_ms"] == "scenario"
    assert flags.echo()["origin"]["chunk_ms"] == "flag"


def test_load_asks_for_the_same_server_vad_as_replay() -> None:
    """load dropped replay's 800 ms silence_duration_ms: the same scenario then ran with a
    different server VAD in load and in replay."""
    load = make_plan(load_config(inputs=[str(HELLO)], turn_detection="server_vad", count=1))
    replay = resolve(CliOptions(turn_detection="server_vad"), load_inputs([HELLO]).settings)
    vad = {"type": "server_vad", "silence_duration_ms": 800}
    assert load.settings.to_session_object()["turn_detection"] == vad
    assert replay.settings.to_session_object()["turn_detection"] == vad


def test_send_phases_are_checked_against_the_chunk_used(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, "chunk_ms = 20")
    with pytest.raises(BadInput, match=r"chunk \(20 ms\)"):
        load_config(inputs=[str(path)], sessions=1, count=1, send_phases=40).validate()
