"""Why a session attempt did not become a session: one word per attempt, counted by load.

A load test that never connected must say why (issue 17.1): every attempt that was not
admitted is counted under one cause, printed in the summary and written to report.json.
The vocabulary is the client's (``OpenFailed.cause``, docs/metrics.md "Session and
admission"): ``refused``, ``dns``, ``tls``, ``http_status``, ``not_websocket``,
``closed_after_upgrade``, ``handshake_timeout``, ``garbage``, ``rejected_capacity``,
``rejected_other``, ``timeout``.

:func:`attempt_cause` is the one place load decides it. The client states the cause itself
once it carries ``OpenFailed.cause``; until then (and for an exception the client did not
translate) the cause is derived here from what there is: the attempt's ``admission``, the
exception's type, and the library exception it was raised from (``__context__``: the client
raises ``OpenFailed(...) from None``, which hides the original from tracebacks but keeps it).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from typing import Final

from websockets.exceptions import ConnectionClosed, InvalidMessage, InvalidStatus

CAUSES: Final = (
    "refused",
    "dns",
    "tls",
    "http_status",
    "not_websocket",
    "closed_after_upgrade",
    "handshake_timeout",
    "garbage",
    "rejected_capacity",
    "rejected_other",
    "timeout",
)
#: A failure this module cannot place (reported with its message, never dropped).
UNKNOWN: Final = "other"


def attempt_cause(exc: BaseException) -> str:
    """The cause of a failed attempt: the client's own word when it gives one."""
    return getattr(exc, "cause", None) or _derived_cause(exc)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, innermost last."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _unparsable_answer(exc: InvalidMessage) -> str:
    """An answer to the upgrade websockets could not parse: an HTTP answer that is no
    upgrade (``HTTP/1.0 200 OK``, a close before any answer) or bytes that are no HTTP.
    websockets quotes the line it received last in its message (``…: <line>``)."""
    inner = list(_chain(exc))[-1]
    if isinstance(inner, EOFError):
        return "not_websocket"  # accepted, then closed without answering the upgrade
    received = str(inner).rsplit(": ", 1)[-1]
    return "not_websocket" if received.startswith("HTTP/") else "garbage"


def _derived_cause(exc: BaseException) -> str:
    admission = getattr(exc, "admission", None)
    if admission in ("rejected_capacity", "rejected_other") and getattr(exc, "error", None):
        return str(admission)  # the server answered session.update with an error
    for link in _chain(exc):
        if isinstance(link, ssl.SSLError | ssl.CertificateError):
            return "tls"
        if isinstance(link, socket.gaierror):
            return "dns"
        if isinstance(link, ConnectionRefusedError):
            return "refused"
        if isinstance(link, InvalidStatus):
            status = link.response.status_code
            return "http_status" if status >= 400 else "not_websocket"
        if isinstance(link, InvalidMessage):
            return _unparsable_answer(link)
        if isinstance(link, ConnectionClosed):
            return "closed_after_upgrade"
    message = str(exc)
    if admission == "timeout" or isinstance(exc, TimeoutError):
        return "handshake_timeout" if "session.created" in message else "timeout"
    if "before session.created" in message:  # the client's words for a close in the handshake
        return "closed_after_upgrade"
    if admission == "rejected_other":
        return "http_status" if "HTTP " in message else "rejected_other"
    return UNKNOWN
