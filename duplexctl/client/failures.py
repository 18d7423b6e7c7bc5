"""Why a connection could not be made: an exception → its :class:`Cause` and one line.

Why a module of its own: the connection used to classify inside its socket code, so what a
failure is called (the cause ``load`` counts attempts by) and what the user is told to do
(``--ca-file``, ``wss://``, the path a duplex server serves) could only be tested through a
real failing server. Here it is a pure function of the exception, the URL and two facts the
connection knows (was TCP/TLS up? how long was waited?); the hostile-server tests check the
same lines end to end, and tests/test_client_handshake.py checks every rule without a socket.
The rules are tried in order, the most specific first.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from websockets.exceptions import InvalidHandshake, InvalidStatus

from duplexctl.client.causes import Cause
from duplexctl.client.websocket import UpgradeUnanswered

#: what to check when the upgrade is refused with this HTTP status
STATUS_HINTS: dict[int, str] = {
    401: "check --api-key",
    403: "check --api-key",
    404: "no websocket at this path; duplex servers serve /v1/realtime?duplex=1",
}


@dataclass(frozen=True, slots=True)
class Failure:
    cause: Cause
    message: str  # one line, starting with the URL the user gave


def classify(
    exc: BaseException, url: str, *, where: str, connected: bool, timeout_s: float
) -> Failure:
    """The cause and message of a failure to connect to ``url`` or to upgrade.

    ``where`` is the URL as the user gave it (messages start with it); ``connected``: TCP
    and TLS were up, only the upgrade failed; ``timeout_s``: how long the connection waited.
    """
    secure = url.startswith("wss://")
    if isinstance(exc, TimeoutError):
        if connected:
            what = "accepted the connection but did not answer the websocket upgrade"
        else:
            what = "did not complete the " + ("TLS" if secure else "TCP") + " connection"
        return Failure(Cause.TIMEOUT, f"{where}: the server {what} within {timeout_s:g} s")
    if isinstance(exc, InvalidStatus):
        response = exc.response
        return refused_upgrade(
            where, response.status_code, response.reason_phrase, response.headers.get("Location")
        )
    parts = urlsplit(url)
    if isinstance(exc, ConnectionRefusedError):
        return Failure(
            Cause.REFUSED,
            f"{where}: cannot connect: nothing is listening at {parts.netloc} (connection refused)",
        )
    if isinstance(exc, socket.gaierror):
        host = parts.hostname or "?"
        return Failure(
            Cause.DNS, f"{where}: cannot resolve the host name {host!r} ({exc.strerror or exc})"
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        return Failure(
            Cause.TLS,
            f"{where}: TLS certificate verification failed ({exc.verify_message}); pass "
            "--ca-file PEM with the CA that signed the server's certificate, or --insecure "
            "to skip verification",
        )
    if isinstance(exc, ssl.SSLError) or (secure and not connected and isinstance(exc, OSError)):
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None)
        return Failure(
            Cause.TLS,
            f"{where}: the TLS handshake failed ({reason or type(exc).__name__}); if the "
            "server does not speak TLS, use ws:// instead of wss://",
        )
    if isinstance(exc, UpgradeUnanswered):
        hint = "" if secure else " (a TLS port? then use wss://)"
        return Failure(Cause.NOT_WEBSOCKET, f"{where}: {exc}{hint}")
    if isinstance(exc, InvalidHandshake):
        return Failure(
            Cause.NOT_WEBSOCKET,
            f"{where}: the server did not answer as a websocket server: {exc}",
        )
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return Failure(Cause.NETWORK, f"{where}: cannot connect: {detail or type(exc).__name__}")


def refused_upgrade(where: str, status: int, phrase: str, location: str | None) -> Failure:
    """The server answered the upgrade with HTTP ``status`` instead of 101."""
    head = f"{where}: the server answered the websocket upgrade with HTTP {status}"
    head += f" {phrase}" if phrase else ""
    if status >= 400:
        hint = STATUS_HINTS.get(status)
        return Failure(Cause.HTTP_STATUS, head + (f" ({hint})" if hint else ""))
    if 300 <= status < 400 and location:
        hint = f"it redirects to {location}; use that as --url"
    else:
        hint = "a web server, not a websocket endpoint"
    return Failure(Cause.NOT_WEBSOCKET, f"{head} instead of switching to a websocket ({hint})")
