"""The load hot path's shortcuts give exactly what the plain paths give.

Batched send-lag histograms, vectorised HDR indexes, pre-formatted append text and
counter-based client event ids are all invisible in results; these tests pin that.
"""

from __future__ import annotations

import os
import re

import numpy as np
import orjson

from duplexctl.load.recorder import LAG_FOLD_EVERY, Recorder
from duplexctl.load.session import SessionRecord
from duplexctl.protocol import codec, ids
from duplexctl.protocol.client_state import ClientSession
from duplexctl.report.histogram import (
    _LAYOUT,
    HIGHEST_TRACKABLE,
    LatencyHistogram,
    counts_index,
    counts_indices,
)
from duplexctl.report.slices import TimeSlicer, Windows


def test_counts_index_and_counts_indices_match_hdrh() -> None:
    rng = np.random.default_rng(7)
    units = np.concatenate(
        [
            np.arange(0, 70_000),
            rng.integers(0, HIGHEST_TRACKABLE + 1, 20_000),
            2 ** np.arange(0, 32),
            2 ** np.arange(1, 32) - 1,
            [HIGHEST_TRACKABLE],
        ]
    ).astype(np.int64)
    expected = [_LAYOUT.get_counts_array_index(int(u)) for u in units]
    assert counts_indices(units).tolist() == expected
    assert [counts_index(u) for u in units.tolist()] == expected


def test_record_array_equals_record_per_value() -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [
            rng.normal(2.0, 5.0, 20_000),
            rng.uniform(-1e4, 1e7, 1000),
            [0.0005, 0.0015, 0.0025, -0.0005, -0.0015, 0.0, 1e12, -1e12],
        ]
    )
    one, batch = LatencyHistogram(), LatencyHistogram()
    for v in values.tolist():
        one.record(v)
    batch.record_array(values)
    assert one == batch
    assert one.to_dict() == batch.to_dict()


def test_batched_send_lag_equals_per_append_recording() -> None:
    origin = 1000.0
    windows = Windows(warmup_s=5.0, ramp_end_s=12.0)
    rec = Recorder(origin=origin, slice_s=2.0, windows=windows)
    plain = TimeSlicer(2.0, origin=origin, windows=windows)
    rng = np.random.default_rng(11)
    n = 2 * LAG_FOLD_EVERY + 17  # folds by size, then the rest on reading
    ts = origin - 1.0 + np.sort(rng.uniform(0.0, 30.0, n))  # some before the origin: clipped
    ts[:3] = [origin + 2.0, origin + 5.0, origin + 12.0]  # exactly on slice/phase edges
    lags = rng.gamma(2.0, 1.5, n) - 0.5
    for t, lag in zip(ts.tolist(), lags.tolist(), strict=True):
        rec.send_lag(t, lag)
        plain.add_figure(max(t, origin), "send_lag_ms", lag)
    got = rec.slicer
    assert got.encode() == plain.encode()
    assert [s.to_dict() for s in got.slices()] == [s.to_dict() for s in plain.slices()]
    assert rec.headline() == plain.after_warmup()
    assert len(rec.live(now=float(ts.max()))["send_lag_window"]) > 0


def test_client_event_ids_unique_and_well_formed() -> None:
    made = [ids.client_event_id() for _ in range(50_000)]
    assert len(set(made)) == len(made)
    assert all(re.fullmatch(r"evt_[0-9a-f]{32}", i) for i in made)


def test_client_event_ids_differ_in_a_forked_child() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.write(write, ids.client_event_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    ours = ids.client_event_id()
    assert re.fullmatch(r"evt_[0-9a-f]{32}", child)
    assert child[4:20] != ours[4:20]  # a fresh per-process prefix


def test_append_text_is_the_append_event_encoded() -> None:
    cs = ClientSession()
    audio = "AAEC/+9aQ0Q=" * 200
    text = cs.append_text(audio, audio_end_ms=1700, duration_ms=100)
    event = orjson.loads(text)
    expected = cs.append(audio, duration_ms=100, audio_end_ms=1700)
    expected["event_id"] = event["event_id"]
    assert text == codec.dumps(expected)
    assert re.fullmatch(r"evt_[0-9a-f]{32}", event["event_id"])


def test_live_view_counts_running_sessions_as_attempts_and_admitted() -> None:
    """Outcomes are booked at session end; the live view must still show running, admitted
    sessions (it read "attempts 0 admitted 0" beside "active 2 (admitted 2)")."""
    rec = Recorder(origin=0.0)
    running = SessionRecord(worker=0, index=0, attempt=0)
    rec.session_started(running)
    rec.session_admitted(running, {})
    connecting = SessionRecord(worker=0, index=1, attempt=0)
    rec.session_started(connecting)
    live = rec.live(now=1.0)
    assert (live["active"], live["attempts"], live["admitted"]) == (2, 2, 1)
