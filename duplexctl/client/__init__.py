"""The asyncio client transport shared by replay, load, talk and probe.

The protocol logic lives in :mod:`duplexctl.protocol.client_state` (sans-I/O); this package
adds sockets, time and tasks around it. See :mod:`duplexctl.client.connection`.
"""

from duplexctl.client.connection import (
    AdmissionRejected,
    ConnectionLost,
    ConnectionLostError,
    ConnectionOptions,
    ConnectionTimings,
    DuplexConnection,
    HandshakeFailed,
    OpenFailed,
    ResumeFailed,
    ResumeRecord,
    connect,
)
from duplexctl.protocol.client_state import ViolationRecorded

__all__ = [
    "AdmissionRejected",
    "ConnectionLost",
    "ConnectionLostError",
    "ConnectionOptions",
    "ConnectionTimings",
    "DuplexConnection",
    "HandshakeFailed",
    "OpenFailed",
    "ResumeFailed",
    "ResumeRecord",
    "ViolationRecorded",
    "connect",
]
