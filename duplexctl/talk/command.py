"""``duplexctl talk`` end to end: the ``--record`` directory, the conversation, its ending."""

from __future__ import annotations

import asyncio

from duplexctl.talk.config import TalkConfig


def run(config: TalkConfig, *, live: bool | None = None, overwrite: bool = False) -> int:
    """One live conversation (``live``: the live view, else plain lines; None: by terminal).
    Raises the session's error (exit 2 / 3) or KeyboardInterrupt (130) as it ended."""
    from duplexctl.rundir import announce, prepare_run_dir
    from duplexctl.talk.session import run_talk
    from duplexctl.talk.view import make_view

    record = config.record_dir
    if record is not None:
        prepare_run_dir(record, flag="--record", overwrite=overwrite, command="talk")
    try:
        result = asyncio.run(run_talk(config, make_view(None if live is None else not live)))
    finally:
        if record is not None:
            announce(record)
    if result.error is not None:
        raise result.error
    if result.interrupted:
        raise KeyboardInterrupt
    return 0
