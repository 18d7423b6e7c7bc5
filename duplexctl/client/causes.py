"""Why a connection attempt failed: one fixed vocabulary (issue 17.1, docs/metrics.md).

A user whose sessions never opened needs to know *what the server did*, and ``load`` counts
its failed attempts by this word, so it is a small closed set, defined here once. Every
:class:`~duplexctl.client.connection.OpenFailed` carries exactly one of them as ``cause``,
next to the coarser docs/metrics.md ``admission`` outcome it maps to (:data:`ADMISSION`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Cause(StrEnum):
    """What happened to one connection attempt (the value is what reports print)."""

    REFUSED = "refused"  # nothing listening: TCP connection refused
    DNS = "dns"  # the host name does not resolve
    TLS = "tls"  # TLS handshake or certificate verification failed
    NETWORK = "network"  # any other socket error (reset, host unreachable)
    HTTP_STATUS = "http_status"  # the upgrade was refused with an HTTP error status (4xx/5xx)
    NOT_WEBSOCKET = "not_websocket"  # answered, but not as a websocket server (plain HTTP, …)
    TIMEOUT = "timeout"  # no TCP/TLS connection or no answer to the upgrade in time
    CLOSED_AFTER_UPGRADE = "closed_after_upgrade"  # upgraded, then closed before session.created
    HANDSHAKE_TIMEOUT = "handshake_timeout"  # upgraded, no session.created in time
    GARBAGE = "garbage"  # upgraded, then frames that are not the protocol
    REJECTED_CAPACITY = "rejected_capacity"  # resource_exhausted / duplex_session_busy
    REJECTED_OTHER = "rejected_other"  # any other error answering session.update
    UNSUPPORTED_INPUT = "unsupported_input"  # opened, but needs input duplexctl cannot send


#: The docs/metrics.md ``admission`` outcome of each cause.
ADMISSION: Final[dict[Cause, str]] = {
    Cause.REFUSED: "transport_error",
    Cause.DNS: "transport_error",
    Cause.TLS: "transport_error",
    Cause.NETWORK: "transport_error",
    Cause.HTTP_STATUS: "rejected_other",
    Cause.NOT_WEBSOCKET: "transport_error",
    Cause.TIMEOUT: "timeout",
    Cause.CLOSED_AFTER_UPGRADE: "transport_error",
    Cause.HANDSHAKE_TIMEOUT: "timeout",
    Cause.GARBAGE: "transport_error",
    Cause.REJECTED_CAPACITY: "rejected_capacity",
    Cause.REJECTED_OTHER: "rejected_other",
    Cause.UNSUPPORTED_INPUT: "rejected_other",
}
