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
