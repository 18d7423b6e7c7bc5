"""Scenario parsing: the format documented in duplexctl.scenario, and one-line errors."""

from __future__ import annotations

import wave
from pathlib import Path

import pytest

from duplexctl.errors import BadInput
from duplexctl.scenario.model import (
    Anchor,
    BargeIn,
    Cancel,
    Commit,
    Drop,
    Expectation,
    Interrupt,
    Pace,
    Say,
    Silence,
    Wait,
)
from duplexctl.scenario.parse import from_audio_files, load_inputs, load_scenario, parse_scenario


def _wav(path: Path, ms: int = 200) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * (16 * ms))
    return path


@pytest.fixture()
def wavs(tmp_path: Path) -> Path:
    _wav(tmp_path / "hello.wav")
    _wav(tmp_path / "stop.wav")
    return tmp_path


FULL = """
name = "full"
description = "every action"

[settings]
turn_detection = "none"
auto_response = false
chunk_ms = 200
pace = "fast"
response_timeout_s = 12.5
prebuffer_ms = 40
model = "m"
voice = "v"
instructions = "be brief"

[session]
temperature = 0.5

[[step]]
action = "say"
file = "hello.wav"
commit = true
tail_ms = 100
expect = { outcome = "spoke", ttfa_ms = "<500", seq_gaps = 0 }

[[step]]
action = "barge_in"
file = "stop.wav"
after_ms = 300
interrupt = "barge_in"
expect = { outcome = "cancelled", reason = ["barge_in", "turn_detected"], cancel_ack_ms = "0..800" }

[[step]]
action = "wait"
timeout_s = 5

[[step]]
action = "silence"
ms = 250

[[step]]
action = "cancel"
after_ms = 100
anchor = "start"

[[step]]
action = "drop"
after_ms = 50
resume_after_ms = 700

[[step]]
action = "commit"
response_create = false
"""


def test_full_scenario_parses(wavs: Path) -> None:
    sc = parse_scenario(FULL, wavs / "full.toml")
    assert sc.name == "full" and sc.description == "every action"
    s = sc.settings
    assert s.turn_detection == "none" and s.auto_response is False and s.chunk_ms == 200
    assert s.pace is Pace.FAST and s.response_timeout_s == 12.5 and s.prebuffer_ms == 40
    assert (s.model, s.voice, s.instructions) == ("m", "v", "be brief")
    assert s.session == {"temperature": 0.5}
    say, barge, wait, silence, cancel, drop, commit = sc.steps
    assert isinstance(say, Say) and say.file == wavs / "hello.wav" and say.commit is True
    assert say.tail_ms == 100 and say.index == 1
    assert [e.name for e in say.expect] == ["outcome", "ttfa_ms", "seq_gaps"]
    assert isinstance(barge, BargeIn) and barge.after_ms == 300
    assert barge.interrupt is Interrupt.BARGE_IN and barge.anchor is Anchor.FIRST_AUDIO
    assert isinstance(wait, Wait) and wait.timeout_s == 5
    assert isinstance(silence, Silence) and silence.ms == 250
    assert isinstance(cancel, Cancel) and cancel.anchor is Anchor.START
    assert isinstance(drop, Drop) and drop.resume_after_ms == 700
    assert isinstance(commit, Commit) and commit.response_create is False
    assert sc.audio_files == [wavs / "hello.wav", wavs / "stop.wav"]


def test_defaults(wavs: Path) -> None:
    sc = parse_scenario('[[step]]\naction = "say"\nfile = "hello.wav"\n', wavs / "d.toml")
    assert sc.name == "d"
    (say,) = sc.steps
    assert isinstance(say, Say) and say.commit is None and say.tail_ms == 200
    assert sc.settings.turn_detection is None and sc.settings.session == {}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('[[step]]\naction = "bargein"\n', "step 1: unknown action 'bargein'"),
        ('[[step]]\nfile = "hello.wav"\n', "step 1: missing 'action'"),
        ('[[step]]\naction = "say"\n', "step 1: say: missing 'file'"),
        (
            '[[step]]\naction = "say"\nfile = "nope.wav"\n',
            "step 1: say: file: no such file 'nope.wav'",
        ),
        ('[[step]]\naction = "silence"\n', "step 1: silence: missing 'ms'"),
        ('[[step]]\naction = "silence"\nms = -5\n', "step 1: silence: ms must be >= 0"),
        (
            '[[step]]\naction = "wait"\ntimeout_s = "x"\n',
            "step 1: wait: timeout_s must be a number",
        ),
        ('[[step]]\naction = "cancel"\nafter = 3\n', "step 1: cancel: unknown key 'after'"),
        ('[[step]]\naction = "cancel"\nanchor = "end"\n', "step 1: cancel: anchor must be one of"),
        (
            '[[step]]\naction = "wait"\nexpect = { ttfa = "<5" }\n',
            "step 1: expect: unknown figure 'ttfa'",
        ),
        (
            '[[step]]\naction = "wait"\nexpect = { ttfa_ms = "fast" }\n',
            "step 1: expect: ttfa_ms = 'fast' is not a bound",
        ),
        (
            '[[step]]\naction = "wait"\nexpect = { outcome = "ok" }\n',
            "step 1: expect: unknown outcome 'ok'",
        ),
        ('[[step]]\naction = "wait"\nexpect = 3\n', "step 1: expect must be a table"),
        (
            '[[step]]\naction = "barge_in"\nfile = "stop.wav"\ninterrupt = "yell"\n',
            "step 1: barge_in: interrupt must be one of",
        ),
        ("name = 'x'\n", "no steps"),
        ("step = 3\n", "'step' must be an array of tables"),
        ('stpe = 1\n[[step]]\naction = "wait"\n', "unknown top-level key 'stpe'"),
        ('[settings]\npace = "slow"\n[[step]]\naction = "wait"\n', "settings: pace must be"),
        (
            '[settings]\nturn_detection = "semantic_vad"\n[[step]]\naction = "wait"\n',
            "settings: turn_detection must be",
        ),
        ('[settings]\nchunk_ms = 0\n[[step]]\naction = "wait"\n', "settings: chunk_ms must be"),
        ('[settings]\nspeed = 2\n[[step]]\naction = "wait"\n', "settings: unknown key 'speed'"),
        ("[[step]\n", "not valid TOML"),
    ],
)
def test_malformed_is_one_line_naming_file_and_problem(wavs: Path, body: str, problem: str) -> None:
    path = wavs / "x.toml"
    with pytest.raises(BadInput) as info:
        parse_scenario(body, path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert problem in message
    assert "\n" not in message


def test_the_issue_example_message(wavs: Path) -> None:
    body = "\n".join(
        [
            '[[step]]\naction = "say"\nfile = "hello.wav"',
            '[[step]]\naction = "wait"',
            '[[step]]\naction = "bargein"',
        ]
    )
    path = Path("recordings/x.toml")
    with pytest.raises(BadInput, match=r"^recordings/x.toml: step 3: unknown action 'bargein'"):
        parse_scenario(body.replace('"hello.wav"', f'"{wavs / "hello.wav"}"'), path)


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such file"):
        load_scenario(tmp_path / "none.toml")
    bad = tmp_path / "bin.toml"
    bad.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(BadInput, match="cannot read"):
        load_scenario(bad)


def test_wav_list_is_say_and_wait_per_file(wavs: Path) -> None:
    sc = from_audio_files([wavs / "hello.wav", wavs / "stop.wav"])
    kinds = [type(s).__name__ for s in sc.steps]
    assert kinds == ["Say", "Wait", "Say", "Wait"]
    assert [s.index for s in sc.steps] == [1, 2, 3, 4]
    with pytest.raises(BadInput, match=r"nope\.wav: no such file"):
        from_audio_files([wavs / "nope.wav"])


def test_load_inputs_dispatch(wavs: Path) -> None:
    toml = wavs / "s.toml"
    toml.write_text('[[step]]\naction = "say"\nfile = "hello.wav"\n')
    assert load_inputs([toml]).source == toml
    assert len(load_inputs([wavs / "hello.wav"]).steps) == 2
    with pytest.raises(BadInput, match="must be the only input"):
        load_inputs([toml, wavs / "hello.wav"])
    with pytest.raises(BadInput, match="nothing to replay"):
        load_inputs([])


@pytest.mark.parametrize(
    ("raw", "actual", "holds"),
    [
        ("<500", 499.9, True),
        ("<500", 500, False),
        ("<=500", 500, True),
        (">0", 0, False),
        (">=0", 0, True),
        ("==0", 0, True),
        ("!=0", 0, False),
        (0, 0, True),
        (3, 4, False),
        ("100..200", 150, True),
        ("200..100", 250, False),
        ("<5", None, False),
        ("<5", "fast", False),
    ],
)
def test_numeric_bounds(raw: object, actual: object, holds: bool) -> None:
    exp = Expectation.parse_number("ttfa_ms", raw)
    assert exp is not None
    assert exp.holds(actual) is holds


def test_text_expectations(wavs: Path) -> None:
    sc = parse_scenario(
        '[[step]]\naction = "wait"\n'
        'expect = { reason = ["barge_in", "turn_detected"], status = "cancelled", early_start = false }\n',
        wavs / "t.toml",
    )
    reason, status, early = sc.steps[0].expect
    assert reason.holds("turn_detected") and not reason.holds("client_cancelled")
    assert status.holds("cancelled") and not status.holds(None)
    assert early.holds(False) and not early.holds(True)


def test_bundled_scenarios_parse() -> None:
    root = Path(__file__).resolve().parent.parent / "recordings"
    tomls = sorted(root.glob("*.toml"))
    assert len(tomls) >= 5, tomls  # hello, pause, interruption, turn_taking, backchannel …
    for path in tomls:
        sc = load_scenario(path)
        assert sc.steps, path
