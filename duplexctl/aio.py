"""Ending background tasks: the one way every command cancels a task and waits for it.

A background task (a ticker, a timer, the microphone, a resume in progress) is cancelled when
what it served ends, and must be *waited for*: until it has run its own clean-up, its files and
sockets are not settled. Waiting on a cancelled task raises ``CancelledError``, so the code
used to wrap the wait in ``contextlib.suppress(BaseException)`` — which also dropped the task's
real failure (a bug in it went unseen) and swallowed a Ctrl-C (``KeyboardInterrupt``) raised
inside it. :func:`cancel_and_wait` suppresses exactly the cancellation it asked for:

* a task that ends cancelled, or had finished, is fine;
* a task that failed with another exception is logged with its traceback (logger
  ``duplexctl``; Python prints it on stderr when nothing else is configured) — raising it
  here would replace whatever the caller is already handling;
* ``KeyboardInterrupt`` and ``SystemExit`` are never swallowed (asyncio raises them out of
  the event loop itself, past any await);
* if the *caller* is cancelled while it waits, every task has still been cancelled and the
  caller's cancellation propagates (``Task.cancelling()`` grew during the wait; a caller
  cleaning up after a cancellation it caught earlier is not cancelled again by it).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("duplexctl")


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel each of ``tasks`` (None is skipped) and wait until all have ended."""
    todo = [t for t in tasks if t is not None]
    for task in todo:
        task.cancel()
    current = asyncio.current_task()
    # a caller that caught a cancellation earlier and went on to clean up (Ctrl-C: still
    # close and save) keeps its count; only a cancellation arriving during the wait is its own
    before = current.cancelling() if current is not None else 0
    for task in todo:
        try:
            await task
        except asyncio.CancelledError:
            if current is not None and current.cancelling() > before:
                raise  # the caller was cancelled while it waited: not ours to swallow
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # the task's own failure, not the cancel: never lost
            name = task.get_name() if isinstance(task, asyncio.Task) else repr(task)
            log.error("background task %s failed", name, exc_info=True)
