"""The probes; importing this package registers them (see :mod:`duplexctl.probe.registry`).

Run order matters: probes that need every admission slot free (admission) run before probes
that may leave a slot held by a buggy server (abandoned-handshake runs last, because on a
server with that bug its slot stays taken for the whole disconnect grace).
"""

from duplexctl.probe.probes import (  # noqa: F401
    abandoned,
    admission,
    bad_input,
    barge_race,
    fencing,
    handshake,
    heartbeat,
    responses,
    resume,
    tools,
)
