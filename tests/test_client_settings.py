"""SessionSettings builds the opening session.update like the golden transcripts' client.

Where its values come from (defaults, scenario, --session, flags) is the resolver's job:
tests/test_resolver.py and tests/test_settings_precedence.py.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

from duplexctl.errors import BadInput
from duplexctl.protocol.settings import SessionSettings, ref_audio_data_uri


def golden_session(load_wire: Any, name: str) -> dict[str, Any]:
    first = next(line for line in load_wire(name) if line["dir"] == "out")
    return first["frame"]["session"]


def test_matches_golden_client_object(load_wire: Any) -> None:
    settings = SessionSettings(
        model="fake/Qwen3-Omni-duplex-peer", instructions="You are a helpful voice assistant."
    )
    obj = settings.to_session_object()
    assert obj.pop("audio") == {"output": {"sample_rate_hz": 24000}}
    assert obj == golden_session(load_wire, "commit_turn")
    vad = SessionSettings(
        model="fake/Qwen3-Omni-duplex-peer",
        instructions="You are a helpful voice assistant.",
        turn_detection="server_vad",
        vad_silence_ms=800,
    ).to_session_object()
    vad.pop("audio")
    assert vad == golden_session(load_wire, "server_vad_turn")


def test_defaults_are_explicit() -> None:
    obj = SessionSettings().to_session_object()
    assert "model" not in obj and "instructions" not in obj and "voice" not in obj
    assert obj["input_audio_format"] == "pcm16" and obj["sample_rate_hz"] == 16000
    assert obj["output_audio_format"] == "pcm16" and obj["turn_detection"] is None
    assert obj["extra_body"] == {"auto_response": False}
    vad = SessionSettings(turn_detection="server_vad").to_session_object()
    assert vad["turn_detection"] == {"type": "server_vad"}


def test_ref_audio_path_and_data_uri(tmp_path: Path) -> None:
    wav = tmp_path / "voice.wav"
    soundfile.write(wav, np.zeros(1600, dtype=np.float32), 16000, subtype="PCM_16")
    uri = SessionSettings(ref_audio=wav).to_session_object()["ref_audio"]
    assert uri.startswith("data:audio/wav;base64,")
    assert base64.b64decode(uri.split(",", 1)[1]) == wav.read_bytes()
    assert ref_audio_data_uri("data:audio/wav;base64,AAAA") == "data:audio/wav;base64,AAAA"
    flac = tmp_path / "voice.flac"
    soundfile.write(flac, np.zeros((1600, 2), dtype=np.float32), 22050)
    converted = base64.b64decode(ref_audio_data_uri(flac).split(",", 1)[1])
    assert converted[:4] == b"RIFF" and converted[8:12] == b"WAVE"
    with pytest.raises(BadInput, match="cannot read --ref-audio"):
        ref_audio_data_uri(tmp_path / "missing.wav")
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"not audio at all")
    with pytest.raises(BadInput, match="not a readable audio file"):
        ref_audio_data_uri(junk)


def test_passthrough_keys_merge_last_and_vad_options_only_into_server_vad() -> None:
    """``extra`` (session-object keys no field covers) merges recursively over the built
    object; ``vad_options`` joins the server VAD object and never turns null into VAD."""
    settings = SessionSettings(
        model="m",
        turn_detection="server_vad",
        vad_silence_ms=500,
        extra={"extra_body": {"force_listen_count": 0}, "idle_timeout_s": 60},
        vad_options={"threshold": 0.6},
    )
    obj = settings.to_session_object()
    assert obj["extra_body"] == {"auto_response": False, "force_listen_count": 0}
    assert obj["turn_detection"] == {
        "type": "server_vad",
        "silence_duration_ms": 500,
        "threshold": 0.6,
    }
    assert obj["idle_timeout_s"] == 60
    none = SessionSettings(turn_detection="none", vad_options={"threshold": 0.6})
    assert none.to_session_object()["turn_detection"] is None
    assert settings.with_extra({"voice": "y"}).to_session_object()["voice"] == "y"


def test_bad_options() -> None:
    with pytest.raises(BadInput, match="--turn-detection"):
        SessionSettings(turn_detection="semantic_vad")  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="input audio format"):
        SessionSettings(input_format="mp3")
    with pytest.raises(BadInput, match="sample rate"):
        SessionSettings(input_rate=4000)
    with pytest.raises(BadInput, match="VAD silence"):
        SessionSettings(vad_silence_ms=0)
