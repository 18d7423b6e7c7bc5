"""pcm.b64decode / b64encode: pybase64's speed with exactly the standard library's verdicts.

The reference server decides ``bad_audio`` and the client counts delta decode errors with
these, so a faster decoder must not accept or refuse anything the standard library's
``b64decode(validate=True)`` judges otherwise (pybase64 alone refuses excess padding).
"""

from __future__ import annotations

import base64
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplexctl.audio import pcm

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def stdlib(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return None


def ours(text: str) -> bytes | None:
    try:
        return pcm.b64decode(text)
    except pcm.AudioDecodeError:
        return None


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=ALPHABET + "=-_ \n\x00é", max_size=24))
def test_decode_judges_like_the_standard_library(text: str) -> None:
    assert ours(text) == stdlib(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("QUJD", b"ABC"),
        ("QUJD=", b"ABC"),  # excess padding: pybase64 refuses, the standard library accepts
        ("QQ==", b"A"),
        ("", b""),
        ("QQ=", None),
        ("QUJ DRA==", None),
        ("QUJDRA==QUJD", None),
        ("QUJDé", None),
    ],
)
def test_decode_edge_cases(text: str, expected: bytes | None) -> None:
    assert ours(text) == expected


def test_round_trip_of_a_delta_sized_payload() -> None:
    data = os.urandom(9600)  # 200 ms of 24 kHz PCM16
    text = pcm.b64encode(data)
    assert text == base64.b64encode(data).decode("ascii")
    assert pcm.b64decode(text) == data


@settings(max_examples=400, deadline=None)
@given(
    n=st.integers(min_value=0, max_value=4800),
    scale=st.floats(min_value=0.0, max_value=200.0),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    odd=st.booleans(),
)
def test_audible_is_exactly_the_rms_rule(n: int, scale: float, seed: int, odd: bool) -> None:
    """pcm16_audible's one-dot sum of squares decides exactly as sqrt(mean(square(x))) >=
    the silence floor did, around the floor (98.3 of 32768) too; a trailing odd byte is
    ignored."""
    import numpy as np

    x = (np.random.default_rng(seed).standard_normal(n) * scale).astype("<i2")
    data = x.tobytes() + (b"\x01" if odd else b"")
    expected = n > 0 and float(np.sqrt(np.mean(np.square(x.astype(np.float64))))) >= (
        pcm.SILENCE_RMS * 32768.0
    )
    assert pcm.pcm16_audible(data) is expected
