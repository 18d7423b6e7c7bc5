"""The scenario runner headless (what each ``load`` session runs): the same client core.

Real loopback websockets against an in-process reference server, a few seconds of real-time
audio. Checked on the wire (the opt-in trace) and in the server's replies: continuous
``playback.ack`` from the playback clock, ``conversation.item.truncate`` with the heard
position after an interruption, each turn handed to the callback once, no ticker task.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from duplexctl.report.turns import TurnRecord, TurnTimes
from duplexctl.scenario.clips import AppendCache, load_clips
from duplexctl.scenario.config import CliOptions, resolve
from duplexctl.scenario.parse import parse_scenario
from duplexctl.scenario.runner import Headless, Replay
from duplexctl.server.app import start_server
from duplexctl.server.config import ServerConfig

RECORDINGS = Path(__file__).resolve().parent.parent / "recordings"
SHORT = RECORDINGS / "short_ack.wav"

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(120)]

SAY_CANCEL_SAY = f"""
[settings]
turn_detection = "none"
[[step]]
action = "say"
file = "{SHORT}"
[[step]]
action = "cancel"
after_ms = 400
[[step]]
action = "wait"
[[step]]
action = "say"
file = "{SHORT}"
[[step]]
action = "wait"
"""


async def test_headless_runner_acks_continuously_and_truncates_after_a_cancel(
    tmp_path: Path,
) -> None:
    scenario = parse_scenario(SAY_CANCEL_SAY, RECORDINGS / "test.toml")
    config = resolve(CliOptions(), scenario.settings)
    s = config.settings
    clips = load_clips(scenario, s.input_rate, s.input_format_canonical)
    reported: list[TurnRecord] = []
    tasks_seen: set[str] = set()

    def on_turn(record: TurnRecord, times: TurnTimes) -> None:
        reported.append(record)
        tasks_seen.update(t.get_name() for t in asyncio.all_tasks())

    async with await start_server(
        ServerConfig(host="127.0.0.1", port=0, reply_seconds=1.4, chunk_ms=200)
    ) as srv:
        runner = Replay(
            scenario,
            config,
            srv.url,
            clips=clips,
            out_dir=tmp_path,  # the trace is opt-in; asked for here to see the wire
            headless=Headless(appends=AppendCache(s.input_format_canonical), on_turn=on_turn),
        )
        await runner.drive()
    assert runner.completed and not runner.problems
    assert [r.outcome for r in reported] == ["cancelled", "spoke"]  # each turn once
    assert runner.unreported_turns == 0
    assert "replay-ticker" not in tasks_seen and "replay-mic" in tasks_seen

    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    sent = [e["event"] for e in events if e["dir"] == "send"]
    cancelled, spoken = (r.response_id for r in reported)
    truncates = [e for e in sent if e["type"] == "conversation.item.truncate"]
    assert [t["item_id"] for t in truncates] == [f"item_{cancelled}"]
    heard = reported[0].figures["heard_ms"].value
    assert truncates[0]["audio_end_ms"] == int(heard)
    acks = [e["played_ms"] for e in sent if e["type"] == "playback.ack"]
    spoken_acks = [e["played_ms"] for e in sent if e.get("response_id") == spoken]
    assert spoken_acks[0] == 0 and spoken_acks == sorted(spoken_acks)
    assert len(spoken_acks) >= 4  # 0, every ~200 ms played, the final one
    assert spoken_acks[-1] == reported[1].figures["audio_ms"].value  # played out in full
    assert len(acks) >= len(spoken_acks)
    received = [e["event"] for e in events if e["dir"] == "recv"]
    truncated = [e for e in received if e["type"] == "conversation.item.truncated"]
    assert [(e["item_id"], e["audio_end_ms"]) for e in truncated] == [
        (f"item_{cancelled}", int(heard))
    ]
    acknowledged = [e["event"] for e in received if e["type"] == "playback.acknowledged"]
    final = [e for e in acknowledged if e["item_id"] == f"item_{spoken}" and not e["truncate"]]
    assert final and final[-1]["played_ms"] == spoken_acks[-1]  # the server's ledger agrees
    assert any(e["type"] == "session.event_ack" for e in sent)
