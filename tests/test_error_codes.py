"""The client's decisions that rest on an error's code alone (duplexctl/protocol/errors.py):
which errors answer its own bookkeeping, and which handshake refusal means "no server VAD
here" (talk's fallback to push-to-talk)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from duplexctl.protocol.errors import (
    BOOKKEEPING_CODES,
    parse_error,
    refuses_server_vad,
)

WIRE = Path(__file__).resolve().parent / "fixtures" / "wire"


@pytest.mark.parametrize(
    ("code", "message", "falls_back"),
    [
        ("unsupported_turn_detection", "turn_detection.type must be 'server_vad'", True),
        ("server_vad_unavailable", "VAD model failed to load", True),
        # a wrong VAD setting is the user's to fix: talk says so instead of hiding it
        ("invalid_session_config", "turn_detection.threshold must be in [0, 1]", False),
        ("invalid_session_config", "silero vad: bad window", False),
        ("resource_exhausted", "limit=1", False),
    ],
)
def test_talk_falls_back_to_push_to_talk_on_a_vad_refusal_code_only(
    code: str, message: str, falls_back: bool
) -> None:
    error = parse_error({"type": "error", "error": {"code": code, "message": message}})
    assert refuses_server_vad(error) is falls_back
    assert refuses_server_vad(None) is False


def test_the_real_servers_vad_refusals_carry_a_refusal_code() -> None:
    """vLLM-Omni 0.30.0, recorded: each refusal of a turn detection it cannot run."""
    refusals = []
    for line in (WIRE / "session_update.jsonl").read_text().splitlines():
        frame = json.loads(line).get("frame") or {}
        if frame.get("type") == "error":
            error = parse_error(frame)
            if "turn_detection" in error.message:
                refusals.append(error)
    assert refusals and all(refuses_server_vad(e) for e in refusals)


def test_bookkeeping_errors_are_one_set() -> None:
    """One set for replay, load and talk (two lists with different members before)."""
    assert {"playback_item_not_found", "playback_ack_too_late", "response_not_active"} <= (
        BOOKKEEPING_CODES
    )
    assert "resource_exhausted" not in BOOKKEEPING_CODES
