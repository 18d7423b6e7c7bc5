"""The handshake decisions (protocol/handshake.py) and the failure lines (client/failures.py),
without a socket: the frames a server answers an open or a resume with, and the exceptions
a connection meets, each mapped to what the connection then does or says.

The same answers are met end to end by tests/test_client_hostile.py (hostile servers) and
tests/test_client_connection.py (the reference server); here every rule is one case."""

from __future__ import annotations

import json
import socket
import ssl
from typing import Any

import pytest
from websockets.datastructures import Headers
from websockets.exceptions import InvalidHandshake, InvalidStatus
from websockets.http11 import Response

from duplexctl.client.causes import Cause
from duplexctl.client.failures import classify
from duplexctl.client.websocket import UpgradeUnanswered
from duplexctl.protocol import names
from duplexctl.protocol.client_state import ClientSession, Happening, ViolationRecorded
from duplexctl.protocol.handshake import (
    OpenAnswer,
    ResumeAnswer,
    open_answer,
    resume_answer,
    resume_blocked,
)

SID = "duplex-" + "c" * 32


def answers(cs: ClientSession, message: str | bytes) -> list[Happening]:
    """What the transport makes of one message: the session's happenings, then one
    ViolationRecorded per violation the message caused (as DuplexConnection._digest does)."""
    before = len(cs.checker.violations)
    out = cs.on_message(message, 1)
    return out + [
        ViolationRecorded(type="client.violation", recv_ns=1, seq=v.seq, violation=v)
        for v in cs.checker.violations[before:]
    ]


def decided(decide: Any, cs: ClientSession, message: str | bytes) -> Any:
    found = [a for h in answers(cs, message) if (a := decide(h)) is not None]
    assert len(found) <= 1
    return found[0] if found else None


def frame(etype: str, **fields: Any) -> str:
    return json.dumps({"type": etype, **fields})


CREATED = frame("session.created", session={"id": SID}, resume_token="t")


def error(code: str, *, seq: int | None = None) -> str:
    body = {"type": "invalid_request_error", "code": code, "message": "m"}
    return frame("error", error=body, **({"server_event_seq": seq} if seq is not None else {}))


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (CREATED, OpenAnswer.CREATED),
        (error("resource_exhausted"), OpenAnswer.REFUSED),
        (error("invalid_value"), OpenAnswer.REFUSED),
        (b"\x00\x01", OpenAnswer.GARBAGE),
        ("<html>", OpenAnswer.GARBAGE),
        ("[1, 2]", OpenAnswer.GARBAGE),
        ('{"type":"session.created","session":"not an object"}', OpenAnswer.GARBAGE),
        ('{"type":"rate_limits.updated","rate_limits":[]}', None),  # not an answer: wait
    ],
)
def test_what_answers_an_open(message: str | bytes, expected: OpenAnswer | None) -> None:
    cs = ClientSession()
    cs.begin_connection()
    assert decided(open_answer, cs, message) is expected


def test_a_sequenced_error_does_not_answer_an_open() -> None:
    """A sequenced error belongs to the session's stream, not to the handshake."""
    cs = ClientSession()
    cs.begin_connection()
    assert decided(open_answer, cs, CREATED) is OpenAnswer.CREATED
    assert decided(open_answer, cs, error("invalid_value", seq=1)) is None


def resuming() -> ClientSession:
    cs = ClientSession.resuming(SID, "t", 3)
    cs.begin_connection()
    return cs


@pytest.mark.parametrize(
    ("message", "outcome", "fatal"),
    [
        (frame("session.resumed", session_id=SID, session={"id": SID}, resume_token="u"),
         "resumed", False),
        # without its new token it cannot be acted on: not the protocol, try again
        (frame("session.resumed", session={"id": SID}), "garbage", False),
        ('{"type":"session.resync_required","reason":"journal_gap"}', "resync_required", True),
        ('{"type":"session.expired","reason":"lease"}', "session.expired", True),
        ('{"type":"session.closed","reason":"x"}', "session.closed", True),
        ('{"type":"session.replaced"}', "session.replaced", True),
        (error("duplex_session_busy"), "duplex_session_busy", False),
        ("not json", "garbage", False),
        ('{"type":"rate_limits.updated","rate_limits":[]}', None, None),
    ],
)  # fmt: skip
def test_what_answers_a_resume(message: str, outcome: str | None, fatal: bool | None) -> None:
    answer = decided(resume_answer, resuming(), message)
    if outcome is None:
        assert answer is None
    else:
        assert answer == ResumeAnswer(outcome, fatal=bool(fatal))
        assert answer.resumed is (outcome == "resumed")


@pytest.mark.parametrize("code", sorted(names.FATAL_RESUME_CODES))
def test_an_error_that_says_the_session_is_gone_ends_the_retries(code: str) -> None:
    assert decided(resume_answer, resuming(), error(code)) == ResumeAnswer(code, fatal=True)


def test_a_session_that_cannot_resume_is_not_tried() -> None:
    cs = resuming()
    assert resume_blocked(cs) is None
    cs.on_frame({"type": "session.resync_required", "reason": "journal_gap"}, 2)
    assert resume_blocked(cs) == ResumeAnswer("resync_required", fatal=True)
    closed = resuming()
    closed.on_frame({"type": "session.closed", "reason": "x", "server_event_seq": 4}, 2)
    assert resume_blocked(closed) == ResumeAnswer("not_resumable", fatal=True)
    assert resume_blocked(ClientSession()) == ResumeAnswer("not_resumable", fatal=True)


# --- failures to connect ----------------------------------------------------------------------

WS, WSS = "ws://h.example:8000/v1/realtime", "wss://h.example:8443/v1/realtime"


def failure(exc: BaseException, url: str = WS, *, connected: bool = False) -> tuple[Cause, str]:
    f = classify(exc, url, where="URL", connected=connected, timeout_s=2.5)
    assert f.message.startswith("URL: ") and "\n" not in f.message
    return f.cause, f.message


def unverified(why: str) -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, "certificate verify failed")
    exc.verify_message = why  # what ssl sets on the ones it raises
    return exc


def status(code: int, phrase: str = "", location: str | None = None) -> InvalidStatus:
    headers = Headers({"Location": location} if location else {})
    return InvalidStatus(Response(code, phrase, headers, b""))


@pytest.mark.parametrize(
    ("exc", "url", "connected", "cause", "says"),
    [
        (TimeoutError(), WS, False, Cause.TIMEOUT, "did not complete the TCP connection within 2.5 s"),
        (TimeoutError(), WSS, False, Cause.TIMEOUT, "did not complete the TLS connection"),
        (TimeoutError(), WS, True, Cause.TIMEOUT, "did not answer the websocket upgrade"),
        (ConnectionRefusedError(111, "refused"), WS, False, Cause.REFUSED, "nothing is listening at h.example:8000"),
        (socket.gaierror(-2, "Name or service not known"), WS, False, Cause.DNS, "'h.example'"),
        (unverified("self-signed certificate"), WSS, False, Cause.TLS, "(self-signed certificate); pass --ca-file"),
        (ssl.SSLError(1, "wrong version"), WSS, False, Cause.TLS, "use ws:// instead of wss://"),
        (ConnectionResetError(104, "reset"), WSS, False, Cause.TLS, "the TLS handshake failed (reset)"),
        (ConnectionResetError(104, "reset"), WS, False, Cause.NETWORK, "cannot connect: reset"),
        (UpgradeUnanswered("no answer"), WS, True, Cause.NOT_WEBSOCKET, "(a TLS port? then use wss://)"),
        (InvalidHandshake("bad upgrade"), WS, True, Cause.NOT_WEBSOCKET, "did not answer as a websocket server"),
        (status(401, "Unauthorized"), WS, True, Cause.HTTP_STATUS, "HTTP 401 Unauthorized (check --api-key)"),
        (status(404), WS, True, Cause.HTTP_STATUS, "serve /v1/realtime?duplex=1"),
        (status(503, "Busy"), WS, True, Cause.HTTP_STATUS, "HTTP 503 Busy"),
        (status(301, location="ws://h2/x"), WS, True, Cause.NOT_WEBSOCKET, "redirects to ws://h2/x"),
        (status(200, "OK"), WS, True, Cause.NOT_WEBSOCKET, "a web server, not a websocket"),
    ],
)  # fmt: skip
def test_each_failure_to_connect_has_its_cause_and_line(
    exc: BaseException, url: str, connected: bool, cause: Cause, says: str
) -> None:
    got, message = failure(exc, url, connected=connected)
    assert got is cause
    assert says in message
