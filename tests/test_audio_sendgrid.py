"""The send grid: phase assignment, shared timers, and pacers (and load sessions) on it.

Phase choice is pure arithmetic and is checked exactly; the shared sleep runs on a real
event loop, with ``call_later`` counted to show that sleepers due at one instant share a
timer. Load sessions on a grid are checked against a real loopback server.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from duplexctl.audio.pacer import Pacer
from duplexctl.audio.sendgrid import SendGrid
from duplexctl.load.monitor import LoopLagMonitor
from duplexctl.scenario.clips import AppendCache, load_clips
from duplexctl.scenario.config import CliOptions, resolve
from duplexctl.scenario.parse import parse_scenario
from duplexctl.scenario.runner import Headless, Replay
from duplexctl.server.app import start_server
from duplexctl.server.config import ServerConfig

RECORDINGS = Path(__file__).resolve().parent.parent / "recordings"

pytestmark = pytest.mark.timeout(60)


def on_slot(t: float, grid: SendGrid) -> int:
    """The slot number ``t`` lies on (fails if it is not on one)."""
    n = round(t / grid.slot_s)
    assert abs(t - n * grid.slot_s) < 1e-9
    return n


def count_timers(loop: asyncio.AbstractEventLoop) -> list[float]:
    """From now on every ``loop.call_later`` delay is appended to the returned list (the
    caller restores the loop's own method with ``del loop.call_later``)."""
    timers: list[float] = []
    real_call_later = loop.call_later

    def counting_call_later(delay: float, callback, *args):  # type: ignore[no-untyped-def]
        timers.append(delay)
        return real_call_later(delay, callback, *args)

    loop.call_later = counting_call_later  # type: ignore[method-assign]
    return timers


def test_joins_fill_the_least_occupied_phase_earliest_first() -> None:
    grid = SendGrid(0.1, phases=4)
    now = 12.3456
    joined = [grid.join(now) for _ in range(8)]
    starts = [t0 for _, t0 in joined]
    assert all(now <= t0 < now + 0.1 for t0 in starts)  # nobody waits a whole period
    assert starts[:4] == sorted(starts[:4])  # an empty grid: the next slots in order
    assert sorted(p for p, _ in joined[:4]) == [0, 1, 2, 3]  # every phase once...
    assert grid.members == [2, 2, 2, 2]  # ...then every phase twice
    for phase, t0 in joined:
        assert on_slot(t0, grid) % 4 == phase


def test_a_phase_given_back_is_the_next_one_taken() -> None:
    grid = SendGrid(0.1, phases=5)
    phases = [grid.join(0.0)[0] for _ in range(5)]
    assert phases == [0, 1, 2, 3, 4]
    grid.leave(3)
    phase, t0 = grid.join(0.0)
    assert phase == 3 and t0 == pytest.approx(0.06)
    assert grid.members == [1, 1, 1, 1, 1]


def test_bad_grids_are_refused() -> None:
    with pytest.raises(ValueError, match="period_s > 0"):
        SendGrid(0.0)
    with pytest.raises(ValueError, match="phases >= 1"):
        SendGrid(0.1, phases=0)


async def test_sleepers_due_together_share_one_timer_and_wake_on_time() -> None:
    grid = SendGrid(0.1, phases=10)
    loop = asyncio.get_running_loop()
    timers = count_timers(loop)
    woke: dict[str, float] = {}

    async def sleeper(name: str, due: float) -> None:
        await grid.sleep_until(due, due - time.monotonic())
        woke[name] = time.monotonic()

    try:
        now = time.monotonic()
        first, second = now + 0.05, now + 0.08
        tasks = [
            asyncio.create_task(sleeper("a", first)),
            asyncio.create_task(sleeper("b", first)),
            asyncio.create_task(sleeper("c", first)),
            asyncio.create_task(sleeper("d", second)),
        ]
        cancelled = asyncio.create_task(sleeper("x", first))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.gather(*tasks)
    finally:
        del loop.call_later
    assert len(timers) == 2  # one per distinct instant, not one per sleeper
    assert set(woke) == {"a", "b", "c", "d"}  # a cancelled sleeper stops nobody else
    assert all(woke[k] >= first - 0.002 for k in "abc") and woke["d"] >= second - 0.002


async def test_pacers_on_a_grid_start_on_distinct_phases_and_give_them_back() -> None:
    grid = SendGrid(0.1, phases=10)
    pacers = [Pacer(100, 16000, grid=grid) for _ in range(3)]
    sent: list[list[float]] = [[] for _ in pacers]

    async def stream(i: int, pacer: Pacer) -> None:
        for _ in range(3):
            chunk = await pacer.next_chunk()
            assert chunk is not None
            sent[i].append(pacer.record_send(chunk))

    await asyncio.gather(*(stream(i, p) for i, p in enumerate(pacers)))
    phases = {on_slot(p.t0 or 0.0, grid) % 10 for p in pacers}
    assert len(phases) == 3 and sum(grid.members) == 3
    for p in pacers:
        assert p.scheduled(2) - p.t0 == pytest.approx(0.2)  # the schedule itself is unchanged
        assert 0 <= p.lag.max_ms < 50
        p.close()
        p.close()  # idempotent
    assert grid.members == [0] * 10


def test_a_fast_pacer_ignores_the_grid() -> None:
    grid = SendGrid(0.1, phases=10)
    pacer = Pacer(100, 16000, pace="fast", grid=grid)
    t0 = pacer.start()
    assert sum(grid.members) == 0 and t0 <= time.monotonic()


async def test_headless_sessions_on_one_grid_stream_on_their_own_phases() -> None:
    """Two load-style sessions sharing a grid: each starts on its own phase, both run their
    turn through, and both phases are free again once the sessions closed."""
    scenario = parse_scenario(
        f"""
[settings]
turn_detection = "none"
[[step]]
action = "say"
file = "{RECORDINGS / "short_ack.wav"}"
[[step]]
action = "wait"
""",
        RECORDINGS / "test.toml",
    )
    config = resolve(CliOptions(), scenario.settings)
    s = config.settings
    clips = load_clips(scenario, s.input_rate, s.input_format_canonical)
    appends = AppendCache(s.input_format_canonical)
    grid = SendGrid(config.chunk_ms / 1000, phases=4)
    async with await start_server(
        ServerConfig(host="127.0.0.1", port=0, reply_seconds=0.6, chunk_ms=200)
    ) as srv:
        runners = [
            Replay(
                scenario,
                config,
                srv.url,
                clips=clips,
                headless=Headless(appends=appends, send_grid=grid),
            )
            for _ in range(2)
        ]
        await asyncio.gather(*(r.drive() for r in runners))
    assert all(r.completed and not r.problems for r in runners)
    phases = [on_slot(r.pacer.t0 or 0.0, grid) % 4 for r in runners]
    assert phases[0] != phases[1]
    assert all(r.pacer.lag.count > 5 and r.pacer.lag.max_ms < config.chunk_ms for r in runners)
    assert grid.members == [0, 0, 0, 0]


async def test_a_first_sleeper_wakes_ahead_of_those_due_with_it() -> None:
    grid = SendGrid(0.1, phases=10)
    order: list[str] = []
    due = time.monotonic() + 0.03

    async def sleeper(name: str, first: bool = False) -> None:
        await grid.sleep_until(due, due - time.monotonic(), first=first)
        order.append(name)

    tasks = [asyncio.create_task(sleeper("a")), asyncio.create_task(sleeper("b"))]
    await asyncio.sleep(0)  # a and b are waiting
    tasks.append(asyncio.create_task(sleeper("sampler", first=True)))
    await asyncio.gather(*tasks)
    assert order == ["sampler", "a", "b"]


def test_next_instant_is_the_earliest_slot_of_an_occupied_phase() -> None:
    grid = SendGrid(0.1, phases=10)
    assert grid.next_instant(0.123) == pytest.approx(0.13)  # empty: the next slot
    assert grid.next_instant(0.13) == pytest.approx(0.13)  # on a slot: that slot
    phase, _ = grid.join(0.157)  # phase 6 (slot 16)
    assert phase == 6
    assert on_slot(grid.next_instant(0.123), grid) == 16
    assert on_slot(grid.next_instant(0.161), grid) == 26  # a period later, same phase
    grid.join(0.157)  # phase 7 (slot 17)
    assert on_slot(grid.next_instant(0.161), grid) == 17


@pytest.mark.timing  # its lags must stay under 50 ms: CI missed a wake beside busy workers
async def test_the_loop_lag_sampler_wakes_with_the_pacers_not_on_its_own() -> None:
    """On a grid, the sampler's instants are the pacers' instants: it adds no timer."""
    grid = SendGrid(0.1, phases=10)
    loop = asyncio.get_running_loop()
    samples: list[tuple[float, float]] = []
    sent: list[float] = []
    pacer = Pacer(100, 16000, grid=grid)
    pacer.start()
    monitor = LoopLagMonitor(lambda t, lag: samples.append((t, lag)), grid=grid)
    timers = count_timers(loop)
    try:
        monitor.start()
        for _ in range(6):
            chunk = await pacer.next_chunk()
            assert chunk is not None
            pacer.record_send(chunk)
            sent.append(chunk.sent or 0.0)
        await monitor.stop()
    finally:
        del loop.call_later
        pacer.close()
    assert len(samples) >= 4
    # one timer per pacer instant (6), plus at most the sampler's next one, pending when it
    # was stopped; a sampler with a timer of its own would have added one per sample
    assert len(timers) <= 7
    for t, lag_ms in samples:
        assert 0.0 <= lag_ms < 50.0
        due = t - lag_ms / 1000
        assert on_slot(due, grid) % 10 == on_slot(pacer.t0 or 0.0, grid) % 10
        # woken ahead of the pacer due with it: the lag is the wake-up's, not the send's
        send = next(s for s in sent if s >= due - 1e-6)
        assert t <= send
