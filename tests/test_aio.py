"""How every command ends its background tasks (duplexctl/aio.py): the cancellation it asked
for is swallowed, nothing else is."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from duplexctl.aio import cancel_and_wait


async def forever() -> None:
    await asyncio.Event().wait()


async def test_cancelled_and_finished_tasks_end_quietly(caplog: pytest.LogCaptureFixture) -> None:
    cleaned: list[str] = []

    async def with_cleanup() -> None:
        try:
            await forever()
        finally:
            cleaned.append("done")

    running = asyncio.create_task(with_cleanup())
    finished = asyncio.create_task(asyncio.sleep(0))
    await asyncio.sleep(0.01)
    await cancel_and_wait(running, finished, None)
    assert running.cancelled() and finished.done() and cleaned == ["done"]
    assert caplog.records == []


async def test_a_task_that_failed_is_logged_not_lost(caplog: pytest.LogCaptureFixture) -> None:
    async def fails_on_cancel() -> None:
        try:
            await forever()
        except asyncio.CancelledError:
            raise ValueError("the ticker's own bug") from None

    task = asyncio.create_task(fails_on_cancel(), name="ticker")
    await asyncio.sleep(0.01)
    with caplog.at_level(logging.ERROR, logger="duplexctl"):
        await cancel_and_wait(task)
    [record] = caplog.records
    assert record.getMessage() == "background task ticker failed"
    assert record.exc_info is not None and "the ticker's own bug" in str(record.exc_info[1])


async def test_the_callers_own_cancellation_propagates_after_every_task_was_cancelled() -> None:
    """A task that takes its time to end (its clean-up awaits), and the caller is cancelled
    while it waits: the caller's CancelledError is not swallowed as if it were the task's."""
    release = asyncio.Event()

    async def slow_to_end() -> None:
        try:
            await forever()
        finally:
            await release.wait()

    slow, other = asyncio.create_task(slow_to_end()), asyncio.create_task(forever())
    await asyncio.sleep(0.01)
    waiter = asyncio.create_task(cancel_and_wait(slow, other))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert other.cancelled()  # cancelled before the wait began
    release.set()
    await asyncio.sleep(0.01)
    assert slow.cancelled()


async def test_a_caller_cleaning_up_after_a_cancellation_it_caught_still_waits() -> None:
    """Ctrl-C: the runner catches its CancelledError to close and save; ending its tasks
    afterwards must not re-raise that old cancellation."""
    ended: list[bool] = []

    async def runner() -> None:
        child = asyncio.create_task(forever())
        with contextlib.suppress(asyncio.CancelledError):  # interrupted: still clean up
            await forever()
        await cancel_and_wait(child)
        ended.append(child.cancelled())

    task = asyncio.create_task(runner())
    await asyncio.sleep(0.01)
    task.cancel()
    await task
    assert ended == [True]
